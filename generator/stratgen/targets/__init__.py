"""Targets: what a project generates from its catalog, one folder each.

``stratlib`` (the package of strategies on stratcore and its tests, always generated),
``lightning`` (plugins for Lightning's Trainer and Fabric built on it), ``deepspeed``
(DeepSpeed accelerators of its devices) and ``docs`` (a Markdown page for each device).

Imports: ``stratgen.spec``, ``stratgen.resolve``, ``stratgen.codegen``. A target imports no
other target, but for one documented seam: the docs target describes what the Lightning and
deepspeed targets generate for a device, so it asks them (``lightning.plugins.select``,
``deepspeed.accelerators.class_name`` and ``rendered``).
"""
