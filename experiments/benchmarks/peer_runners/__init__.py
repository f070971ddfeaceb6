"""Runners of experiments/benchmarks/compare_peers.py: one per library, each printing
one JSON line of results."""
