"""Baseline solvers the papers compare against (even split, single device, PipeDream, list schedulers)."""
