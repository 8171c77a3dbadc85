"""stratcore: the runtime of the strategy packages stratgen generates.

Base classes, launchers, collectives, checkpointing and plugins: every behaviour a
generated strategy has lives here, and generated classes configure it with the facts of their
specs. Importing this package imports nothing else (not torch); its modules do.

Modules import one way only, from the bottom up (tests/test_import_graph.py fails on a cycle,
imports inside functions included; ``if TYPE_CHECKING:`` imports for annotations do not count):

1. version, exceptions, imports (and the generator's contract)
2. collectives, precision, environment, rendezvous, accelerator, checkpoint_io, layer_sync,
   registry
3. launchers (they know strategies only as annotations), sharded_checkpoint, checkpoint_state
4. strategy, then single_device and parallel, then ipu and wrappers/*
5. factory, then testing (which needs strategies only as annotations), and watch (no import)
"""

from .version import __version__

__all__ = ["__version__"]
