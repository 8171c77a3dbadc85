"""Tests of ``stratgen.commands``."""
