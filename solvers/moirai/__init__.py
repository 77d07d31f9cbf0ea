"""MOIRAI (Zhang et al.): operator-fusion coarsening and MILP device placement for latency."""
