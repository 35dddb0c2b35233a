"""Benchmark of kubectl-kvreset (``make bench`` / ``python -m tests.bench``)."""
