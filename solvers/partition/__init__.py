"""Partitioning machinery shared by the solver families: the pipeline shapes searched, the
down-closed sets of a DAG, the reference costs of phase 1 and the even split."""
