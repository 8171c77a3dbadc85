"""Model wrappers: how each engine wraps the model, steps the optimizer and saves state.

One module per engine that needs no more (``ddp``, ``dp``, ``horovod``, ``bagua``, ``xla``,
``poptorch``), one folder per family of strategies that share an engine:

- ``deepspeed/``: DeepSpeed's ZeRO strategy, its config, precision and state, and DeepSpeed's
  accelerator interface built from a spec (``accelerator/``);
- ``fsdp/``: torch's FSDP2 strategy and what it shares with ``model_parallel``: device meshes,
  ``fully_shard``, activation checkpointing;
- ``model_parallel/``: a device mesh of named dimensions (data, tensor, pipeline and context
  parallelism) on FSDP2;
- ``fairscale/``: fairscale's FullyShardedDataParallel and its sharded optimizer (OSS).

Each engine's knowledge stays in its module or folder: what an engine holds of process groups
is registered with ``stratcore.process_group``, a checkpoint in an engine's own format is read
back by its strategy base (``stratcore.checkpoints.sharded``), and the engine's launcher, where
it brings one, is in ``stratcore.launchers``.
"""
