"""Test support for the Lightning target: what the generated Lightning tests import.

- ``runner``: checks that plugins are registered, runs training cases through a real Trainer or
  Fabric in fresh processes, and compares their reports with one process;
- ``suite``: ``PluginTests``, the test class a generated module runs over its rows.

Importing it imports Lightning; the adapters themselves are ``stratcore.lightning``.
"""
