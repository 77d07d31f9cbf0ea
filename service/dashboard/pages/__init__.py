"""The dashboard's routes, one module per page family."""
