"""Tests of ``stratgen.targets``."""
