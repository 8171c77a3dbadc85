"""The default process group's lifetime: its creation, who made it, and its release.

The process group belongs to the process, not to one strategy: a script that launches several
times (training, then evaluation) reuses it, because a second rendezvous on the same address
would meet the first one's leftovers. A group the runtime created is destroyed when the process
ends, or when a launch fails (its peers are gone). A group someone else created (Ray Train, a
torchrun script that called ``init_process_group`` itself, the user's own code) is theirs: the
runtime reuses it where it fits and never destroys it.

Sections:

- **creating**: ``creating_process_group``, the block around the code that creates the default
  group (torch.distributed's ``init_process_group``, Bagua's and torch_xla's own functions), and
  ``import_group_defaults``, which it runs first;
- **who made it**: ``created_by_runtime`` and ``adopt_existing_group``; ``existing_group``,
  ``backend_serves`` and ``refuse_existing_group``, for a strategy that finds a group already
  there;
- **releasing**: ``release_process_group`` and ``release_process_group_at_exit``; engines that
  hold groups of their own register here what lets go of them (``on_release``) and, where they
  destroy groups their own way, how (``destroy_with``), so that this module names none of them.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import sys
from collections.abc import Callable, Generator, Iterable
from types import FunctionType
from typing import Any, NoReturn, TypeVar

import torch.distributed as dist

from .exceptions import MisconfigurationError

# --- creating ------------------------------------------------------------------------------------

#: Modules (with their submodules) whose functions take the default group as a default
#: argument, evaluated on import (``import_group_defaults``); strategies add theirs.
GROUP_DEFAULT_MODULES: set[str] = set()


def import_group_defaults(modules: Iterable[str]) -> None:
    """Import, before the default group exists, modules that take it as a default argument.

    ``torch.distributed.nn.functional`` declares its collectives with ``group=group.WORLD``, a
    default evaluated on import: imported while a group exists (DistributedDataParallel's
    constructor imports it through ``torch._dynamo``), its ten functions keep that group alive
    past ``destroy_process_group`` (fairscale's OSS and ShardedGradScaler do the same). The
    group's gloo worker and transport threads then live on into interpreter shutdown, and
    there, now and then, a thread other than the main one ended the process with "terminate
    called without an active exception" (SIGABRT) after a successful run. Imported first,
    the defaults are None (the default group at call time) and hold nothing, and the group
    and its threads are gone when the exit handler has run.
    """
    modules = tuple(modules)
    GROUP_DEFAULT_MODULES.update(modules)  # for a group reused by later launches
    for name in modules:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


@contextlib.contextmanager
def creating_process_group(group_default_modules: Iterable[str]) -> Generator[None, None, None]:
    """Around the code that creates the default process group, whichever library runs it: the
    modules that take the group as a default argument are imported before it exists, the group
    is recorded as the runtime's, and it is destroyed when the process ends. Where a group
    existed before the block (Lightning reuses one that Ray Train or the script created), the
    block created none: that group is recorded as someone else's (``adopt_existing_group``)."""
    before = _default_group_id()
    if before is None:
        import_group_defaults(group_default_modules)
    yield
    if before is not None:
        adopt_existing_group()
        return
    global _created
    _created = _default_group_id()
    if _created is not None:
        release_process_group_at_exit()


# --- who made it ---------------------------------------------------------------------------------

#: ``id`` of the default group the runtime created (None: it created none, or it is gone).
_created: int | None = None
#: ``id`` of a default group someone else created, once a strategy has seen it.
_adopted: int | None = None


def _default_group_id() -> int | None:
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return id(dist.distributed_c10d._get_default_group())


def created_by_runtime() -> bool:
    """Whether the default process group exists and the runtime created it."""
    current = _default_group_id()
    return current is not None and current == _created


def adopt_existing_group() -> None:
    """Record that the existing default group is someone else's (Ray's, a script's own): it is
    reused, and neither a failed launch nor the end of the process destroys it.

    A group created after the runtime arranged the release at exit, by code it was asked to
    serve (DeepSpeed's ``initialize`` on an accelerator the runtime installed), stays the
    runtime's to release at exit (``release_process_group``); one that existed before (Ray
    Train creates its group before the train function runs) is adopted.
    """
    global _adopted
    if created_by_runtime():
        return
    current = _default_group_id()
    if _release_registered and current != _group_when_release_arranged:
        return
    _adopted = current


def _adopted_by_runtime() -> bool:
    current = _default_group_id()
    return current is not None and current == _adopted


def existing_group() -> tuple[str, int, int] | None:
    """The default group's backend, world size and this process's rank in it (None: there
    is none)."""
    if _default_group_id() is None:
        return None
    return str(dist.get_backend()), dist.get_world_size(), dist.get_rank()


def backend_serves(group_backend: str, backend: str) -> bool:
    """Whether a group created with ``group_backend`` is one of ``backend``: the same name, or
    a name per device type that includes it ('cpu:gloo,cuda:nccl' serves 'gloo' and 'nccl')."""
    if group_backend == backend:
        return True
    if ":" not in group_backend:
        return False
    names = {part.split(":", 1)[-1].strip() for part in group_backend.split(",")}
    return backend in names


def refuse_existing_group(
    asked_by: str, backend: str, world_size: int, rank: int, environment: str | None = None
) -> NoReturn:
    """Raise the one-line error for a default group that cannot serve ``asked_by``: both groups
    (world size, rank, backend), where the existing one came from, as far as this process
    knows, and that it is left as it is. ``environment``: the cluster environment the process
    runs under, which names what may have created a group the runtime did not."""
    found = existing_group()
    assert found is not None, "refuse_existing_group() without a process group"
    have_backend, have_size, have_rank = found
    if created_by_runtime():
        origin = "that an earlier launch in this process created"
        advice = "every launch of a script must use the same devices, nodes and backend"
    else:
        under = f", under {environment}" if environment else ""
        origin = f"that stratcore did not create (the script did, or what started it{under})"
        advice = (
            "give the strategy that group's devices, nodes and backend "
            "(process_group_backend), or create the group with the strategy's"
        )
    raise MisconfigurationError(
        f"this process already belongs to a process group of {have_size} processes (rank "
        f"{have_rank}, backend {have_backend!r}) {origin}, and {asked_by} asks for {world_size} "
        f"(rank {rank}, backend {backend!r}); the group is left as it is: {advice}"
    )


# --- releasing -----------------------------------------------------------------------------------

#: What engines hold of process groups, each let go of by its callable (``on_release``).
_RELEASE_HOOKS: list[Callable[[], None]] = []
#: Engines that destroy the default group their own way; each returns whether it did.
_DESTROYERS: list[Callable[[], bool]] = []


_Hook = TypeVar("_Hook", bound=Callable[[], None])
_Destroyer = TypeVar("_Destroyer", bound=Callable[[], bool])


def on_release(hook: _Hook) -> _Hook:
    """Register a callable that lets go of what an engine holds of process groups (caches of
    groups, models whose engines hold them); ``release_process_group`` calls it first. Returns
    ``hook``, so that it can decorate a function."""
    if hook not in _RELEASE_HOOKS:
        _RELEASE_HOOKS.append(hook)
    return hook


def destroy_with(destroy: _Destroyer) -> _Destroyer:
    """Register an engine's way to destroy the default group (an engine that keeps groups of
    its own destroys them with it); it returns False where its engine is not in use, and
    torch.distributed's ``destroy_process_group`` is called instead."""
    if destroy not in _DESTROYERS:
        _DESTROYERS.append(destroy)
    return destroy


def release_process_group(*, at_exit: bool = False) -> None:
    """Let go of everything that holds process groups and destroy the default group if the
    runtime created it, so that its threads end while the interpreter is whole: during its
    shutdown, gloo's threads can abort the process after a successful run.

    A group lives as long as something holds it, destroyed or not. Besides the modules that
    take it as a default argument (``import_group_defaults``), what holds groups is let go of
    first: DTensor's caches, what engines registered (``on_release``) and defaults of modules
    imported after the group existed; then reference cycles (DDP's reducer, engines) are freed.

    A group someone else created is never destroyed. ``at_exit``: the release when the process
    ends, which also destroys a group created after ``release_process_group_at_exit`` by code
    the runtime was asked to serve (DeepSpeed's ``initialize`` on an installed accelerator),
    unless a strategy has seen it as someone else's (``adopt_existing_group``).
    """
    global _created
    _clear_dtensor_caches()
    for hook in list(_RELEASE_HOOKS):
        with contextlib.suppress(Exception):
            hook()
    _drop_group_defaults()
    gc.collect()  # also where the group is destroyed already: what still holds it is freed
    if not (dist.is_available() and dist.is_initialized()):
        _created = None
        return
    ours = created_by_runtime() or (at_exit and not _adopted_by_runtime())
    if not ours:
        return
    with contextlib.suppress(Exception):
        if not any(destroy() for destroy in list(_DESTROYERS)):
            dist.destroy_process_group()
    _created = None


_release_registered = False
#: ``id`` of the default group that existed when the release at exit was arranged (None: none).
_group_when_release_arranged: int | None = None


def release_process_group_at_exit() -> None:
    """Release the default process group when the interpreter exits (once registered)."""
    global _release_registered, _group_when_release_arranged
    if not _release_registered:
        atexit.register(_release_at_exit)
        _release_registered = True
        _group_when_release_arranged = _default_group_id()


def _release_at_exit() -> None:
    # Python keeps the exception that ended a script for a debugger (sys.last_value and the
    # rest), and its traceback's frames hold what they held: the strategy, the model, the
    # groups. Nothing inspects it once the interpreter exits; let go of it first.
    for name in ("last_exc", "last_type", "last_value", "last_traceback"):
        with contextlib.suppress(AttributeError):
            delattr(sys, name)
    release_process_group(at_exit=True)


def _drop_group_defaults() -> None:
    """Replace by None every default argument that holds a process group in the functions and
    classes of ``GROUP_DEFAULT_MODULES``: imported after the group existed (a later launch
    reusing the group of an earlier one with other modules), they would keep it alive. None
    is the default group at call time, what the defaults meant."""
    if not (GROUP_DEFAULT_MODULES and dist.is_available()):
        return
    prefixes = tuple(f"{name}." for name in GROUP_DEFAULT_MODULES)
    for name, module in list(sys.modules.items()):
        if module is None or (name not in GROUP_DEFAULT_MODULES and not name.startswith(prefixes)):
            continue
        for value in list(vars(module).values()):
            if isinstance(value, type) and value.__module__ == name:
                members = [getattr(member, "__func__", member) for member in vars(value).values()]
            else:
                members = [value]
            for function in members:
                if isinstance(function, FunctionType):
                    _drop_defaults(function)


def _drop_defaults(function: FunctionType) -> None:
    def holds_group(values: Iterable[Any]) -> bool:
        return any(isinstance(value, dist.ProcessGroup) for value in values)

    def dropped(value: Any) -> Any:
        return None if isinstance(value, dist.ProcessGroup) else value

    if function.__defaults__ and holds_group(function.__defaults__):
        function.__defaults__ = tuple(map(dropped, function.__defaults__))
    if function.__kwdefaults__ and holds_group(function.__kwdefaults__.values()):
        function.__kwdefaults__ = {k: dropped(v) for k, v in function.__kwdefaults__.items()}


def _clear_dtensor_caches() -> None:
    """Empty DTensor's caches of sharding plans (FSDP2 fills them): their entries hold device
    meshes, and the meshes the process group, which would then outlive
    ``destroy_process_group`` like the defaults described in ``import_group_defaults``."""
    if "torch.distributed.tensor" not in sys.modules:
        return
    with contextlib.suppress(Exception):
        from torch.distributed.tensor import _collective_utils, _redistribute
        from torch.distributed.tensor.debug import _clear_sharding_prop_cache

        _clear_sharding_prop_cache()
        _redistribute.clear_redistribute_planner_cache()
        _redistribute._gen_transform_infos.cache_clear()
        _collective_utils.MeshTopoInfo.build_from_mesh.cache_clear()
