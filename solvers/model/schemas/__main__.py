"""Regenerate the checked-in ``problem.v1.json`` from the code's settings definition."""

from solvers.model.schemas import main

main()
