"""Settings of the generator's tests."""

from __future__ import annotations

# Fixture projects and golden trees contain generated test modules: they are data here.
collect_ignore_glob = ["fixtures/*", "golden/*"]
