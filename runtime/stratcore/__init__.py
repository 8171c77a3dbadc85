"""stratcore: the runtime of the strategy packages stratgen generates.

Base classes, launchers, collectives, checkpointing and plugins: every behaviour a
generated strategy has lives here, and generated classes configure it with the facts of their
specs. Importing this package imports nothing else (not torch); its modules do.

Modules import one way only, from the bottom up (tests/architecture/test_import_graph.py fails
on a cycle, imports inside functions included; ``if TYPE_CHECKING:`` imports for annotations do
not count):

1. version, exceptions, imports, wording, file_modes, contract/ (torch-free: the generator imports them)
2. collectives, precision/, environment, rendezvous, accelerator, layer_sync, registry,
   process_group, parameter_moves
3. launchers/ (they know strategies through the ``LaunchTarget`` protocols), checkpoints/
4. strategy, then single_device and parallel, then wrappers/ (an engine a module or a folder)
5. factory, lightning/ (the adapters), then testing/ (what generated tests import)
"""

from .version import __version__

__all__ = ["__version__"]
