"""Benchmarks of stratgen and the generated package; run them all with ``python -m benchmarks``."""
