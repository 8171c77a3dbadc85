"""Tests of ``stratgen.spec``."""
