"""The pure core: rounds, tokens, rendering, coverage, records and the fold's arithmetic.

No I/O and no model calls. Every other layer builds on it.
"""
