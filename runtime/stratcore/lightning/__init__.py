"""Lightning plugins made from stratgen specs: the hand-written half of the Lightning target.

A generated package can also emit plugins for Lightning's ``Trainer`` (``lightning.pytorch``) and
``Fabric`` (``lightning.fabric``). Those generated classes are glue only: each one derives from
an adapter here and from the Lightning class that gives the behaviour, and names the generated
stratcore-side class that carries the spec's facts::

    class AcmeParallelStrategy(StrategyAdapter, lightning.pytorch.strategies.DDPStrategy):
        spec = acmelib.strategies.acme_parallel.AcmeParallelStrategy
        environments = (SLURMEnvironment, ...)

The adapters (``accelerators``, ``strategies``, ``environments``, ``precision``) turn the facts
into what Lightning asks of its plugins; everything else is Lightning's.

Supported Lightning: the unified ``lightning`` package, 2.6.x. Importing an adapter module
checks the installed version and fails with one line naming it otherwise. This module, stratcore
and every generated package import Lightning only when an adapter module is imported.
"""

from __future__ import annotations

from ..exceptions import MissingDependencyError
from .contract import REQUIREMENT, SUPPORTED, SUPPORTED_SERIES

INSTALL = f"pip install '{REQUIREMENT}'"

__all__ = ["INSTALL", "SUPPORTED", "SUPPORTED_SERIES", "check_lightning_version"]


def check_lightning_version(version: str | None = None) -> str:
    """Import Lightning and return its version; raise if it is missing or not 2.6.x.

    ``version`` checks a given version string instead of the installed one (for tests).
    """
    if version is None:
        try:
            import lightning
        except ImportError:
            raise MissingDependencyError(
                f"stratcore.lightning needs the 'lightning' package ({SUPPORTED}), which is not "
                f"installed; install it with: {INSTALL}"
            ) from None
        version = str(lightning.__version__)
    parts = version.split(".")
    try:
        series = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        series = (-1, -1)
    if series != SUPPORTED_SERIES:
        raise MissingDependencyError(
            f"stratcore.lightning supports lightning {SUPPORTED} (2.6.x), but lightning {version} "
            f"is installed; install a supported one with: {INSTALL}"
        )
    return version
