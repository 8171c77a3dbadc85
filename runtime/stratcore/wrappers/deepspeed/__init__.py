"""DeepSpeed: the ZeRO strategy and DeepSpeed's accelerator interface built from a spec.

- ``strategy``: ``DeepSpeedStrategyBase``, training through a DeepSpeed engine;
- ``config``: reading and completing the engine's config, loading DeepSpeed, building its ops;
- ``precision``: the fp16 or bf16 section of the config, not autocast;
- ``state``: ZeRO's partitioned state in PyTorch's format, for checkpoints;
- ``select``: which DeepSpeed accelerator a strategy trains on, for its device;
- ``process_groups``: what DeepSpeed holds of process groups, let go of on release;
- ``accelerator/``: DeepSpeed's accelerator interface on the facts of a stratcore accelerator
  (``base``, with ``memory``), and its installation into DeepSpeed (``install``).

Nothing here imports DeepSpeed until a strategy or an accelerator uses it.
"""
