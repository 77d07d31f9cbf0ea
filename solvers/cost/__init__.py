"""The one cost model (DESIGN §4): compute, communication, traffic, memory and lower bounds."""
