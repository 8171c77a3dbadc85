"""stratcore: the runtime of the strategy packages stratgen generates.

Base classes, mixins, launchers, collectives, checkpointing and plugins: every behaviour a
generated strategy has lives here, and generated classes configure it with the facts of their
specs. Importing this package imports nothing else (not torch); its modules do.
"""

from .version import __version__

__all__ = ["__version__"]
