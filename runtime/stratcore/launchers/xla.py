"""The ``xla`` launcher: torch_xla starts the processes (``xmp.spawn``), one per device of the
host or one in all, and this launcher collects rank 0's result.

The strategies it starts are ``stratcore.wrappers.xla``'s; torch_xla is imported only through
the strategy (``xla_module``), when a launch happens.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, Protocol

from ..accelerator import Accelerator
from ..contract import LAUNCHER_OPTIONS
from ..exceptions import MisconfigurationError, ProcessFailedError
from ..precision.base import apply_to_tensors
from ..process_group import release_process_group
from .base import LaunchTarget, Launcher, ParallelLaunchTarget, run_reporting_errors


def _xla_worker(
    index: int,
    strategy: LaunchTarget,
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    results: Any,
) -> None:
    """One process started by torch_xla (``index`` is its ordinal)."""
    try:
        result = strategy.run_worker(function, args, kwargs)
        if strategy.is_global_zero:
            results.put(pickle.dumps(apply_to_tensors(result, lambda t: t.detach().cpu())))
    finally:
        # torch_xla starts its processes with fork by default: they end without atexit handlers.
        release_process_group()


class XLALaunchTarget(ParallelLaunchTarget, Protocol):
    """What the XLA launcher uses of an XLA strategy (``stratcore.wrappers.xla``)."""

    @property
    def accelerator(self) -> Accelerator:
        """The accelerator (how many devices the host has)."""
        ...

    def xla_module(self, name: str = "torch_xla") -> ModuleType:
        """A torch_xla module, imported on first use."""
        ...


class XLALauncher(Launcher):
    """Starts the processes with torch_xla's ``xmp.spawn`` and returns rank 0's result.

    torch_xla starts either one process or one per device of the host, nothing in between.
    """

    name = "xla"

    strategy: XLALaunchTarget

    def __init__(self, strategy: XLALaunchTarget) -> None:
        super().__init__(strategy)
        option = LAUNCHER_OPTIONS["xla"]["start_method"]
        start_method = getattr(strategy, "start_method", None) or option.default
        option.check("start_method", start_method)
        self.start_method = start_method

    @property
    def is_interactive_compatible(self) -> bool:
        return self.start_method == "fork"

    def spawn_arguments(self) -> dict[str, Any]:
        """Keyword arguments for ``xmp.spawn`` besides the function and its arguments."""
        strategy = self.strategy
        wanted = strategy.num_processes
        available = strategy.accelerator.device_count()
        if wanted == 1:
            nprocs = 1
        elif available is None or wanted == available:
            nprocs = None  # torch_xla's way to say "every device"
        else:
            raise MisconfigurationError(
                f"devices={wanted}: torch_xla starts one process or one per device; use "
                f"devices=1 or devices={available}"
            )
        return {"nprocs": nprocs, "start_method": self.start_method}

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        strategy = self.strategy
        if strategy.cluster_environment.creates_processes_externally:
            return run_reporting_errors(strategy, function, args, kwargs)
        spawn_kwargs = self.spawn_arguments()
        xmp = strategy.xla_module("torch_xla.distributed.xla_multiprocessing")
        import torch.multiprocessing as mp

        # A manager's queue, unlike a plain one, survives being pickled to the processes.
        with mp.get_context(self.start_method).Manager() as manager:
            results = manager.Queue()
            try:
                xmp.spawn(
                    _xla_worker, args=(strategy, function, args, kwargs, results), **spawn_kwargs
                )
            except Exception as exc:
                raise ProcessFailedError(f"an XLA process failed: {exc}", error=str(exc)) from exc
            return pickle.loads(results.get()) if not results.empty() else None
