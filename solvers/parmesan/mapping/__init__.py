"""Device mapping for general topologies (Parmesan §V): stage graph, heuristics, bounds, Alg. 1 and 2."""
