"""Tests of ``stratgen.resolve``."""
