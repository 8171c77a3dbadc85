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

#: What an environment that places the processes itself (Ray) may say besides: how many
#: processes it started on this node, and the device it gave this process (as torch names it,
#: 'cuda:1'). Each is optional: an environment that names no variable for it says nothing.
LAYOUT_VALUES = ("local_world_size", "device")
