"""DeepSpeed's accelerator interface for a device DeepSpeed has no class of its own for.

- ``base``: ``DeepSpeedAcceleratorBase``, the interface on the facts of a stratcore accelerator
  (the deepspeed target generates a subclass per device, naming its accelerator as ``spec``);
- ``memory``: the memory part of the interface, from the device's torch module;
- ``install``: how a generated class reaches DeepSpeed, before DeepSpeed binds its op builders.
"""
