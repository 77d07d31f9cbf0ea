"""The one cost model (docs/cost-model.md): compute, communication, traffic, memory and lower bounds."""
