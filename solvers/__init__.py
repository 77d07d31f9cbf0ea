"""Placer's pure library: data model, cost model, simulator, bounds and every solver back-end.

Nothing here imports the web layer; heavy optional libraries load only where used.
"""

__version__ = "0.1.0"
