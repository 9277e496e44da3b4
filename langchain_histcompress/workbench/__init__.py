"""Benchmarks of the package's own overhead; they report figures and assert nothing."""
