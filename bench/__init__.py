"""Benchmarks: speed and quality targets, run as ``.venv/bin/python -m bench.<name>``."""
