"""Benchmarks of fitcore; run each from the repository root: `python -m benchmarks.<name> [--quick]`."""
