"""Tests of ``stratgen.output``."""
