"""torch's fully sharded data parallelism (FSDP2) and what the strategies built on it share.

- ``strategy``: ``FSDPStrategyBase`` ('fsdp') and its mixed precision (``FSDPPrecisionBase``);
- ``fully_shard``: what 'fsdp' and 'model_parallel' share: finding sharded modules, rebinding
  optimizers, full state dicts of DTensor parameters, letting go of a sharded model;
- ``mesh``: device meshes and sharding layouts (Lightning's ``sharding_strategy`` names);
- ``activation_checkpointing``: recomputing the activations of the layers a user names.
"""
