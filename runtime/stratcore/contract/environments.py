"""Cluster environments: the values every environment provides.

Importing this module must not import torch: the generator imports it.
"""

from __future__ import annotations

#: The values every cluster environment provides, each from a ``ValueSource``.
ENVIRONMENT_VALUES = (
    "world_size",
    "global_rank",
    "local_rank",
    "node_rank",
    "main_address",
    "main_port",
)
