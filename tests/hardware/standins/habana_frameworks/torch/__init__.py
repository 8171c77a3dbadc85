"""Stand-in for ``habana_frameworks.torch`` (CPU only, for tests)."""
