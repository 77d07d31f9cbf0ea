"""The exact contiguous partition of a DAG by dynamic programming over its ideals (Tarnawski et al.,
NeurIPS 2020): :mod:`.ideals` (enumeration), :mod:`.stage_model` (stage cost), :mod:`.dp` (the DP),
:mod:`.solver` (the registered ``exact`` back-end)."""
