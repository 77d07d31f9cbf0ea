"""Back-ends of the one MOIRAI formulation: OR-Tools MPSolver (CBC, SCIP, HiGHS), PuLP/CBC, CP-SAT.

Each module contains the untyped third-party API; :mod:`solvers.moirai.backends.result` is what
they return, and :mod:`solvers.moirai.backends.runner` runs one in a child process with a hard
kill at the deadline.
"""
