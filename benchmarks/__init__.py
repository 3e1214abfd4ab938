"""Benchmarks: ``python -m benchmarks.<name>`` from the repository root (``make bench``)."""
