"""Checkpoints: how a strategy saves and restores its state.

- ``io``: how one file is written and read (``CheckpointIO``, ``TorchCheckpointIO``: atomic
  writes, weights-only reads; ``AsyncCheckpointIO``: the write on a background thread);
- ``state``: what a strategy saves and restores (``CheckpointingBase``, which ``StrategyBase``
  derives from): the objects of a checkpoint turned into state dicts and back, whole or sharded;
- ``sharded``: folders that every process writes its own part of, through
  ``torch.distributed.checkpoint``, and their conversion into one file;
- ``dcp_reader``: those folders read as data, never as code (``torch.distributed.checkpoint``
  would unpickle their metadata and bytes items as trusted);
- ``consolidate``: that conversion as a command, ``python -m stratcore.checkpoints.consolidate``.

An engine that writes a checkpoint in its own format (DeepSpeed) records its wrapper's name in
the folder's metadata; its strategy base reads the folder back (as data too). Nothing here names
an engine.
"""
