"""Tests of ``stratgen.codegen``."""
