"""How a generated DeepSpeed accelerator reaches DeepSpeed.

- ``deepspeed_class``: the class DeepSpeed sees for a generated one, a subclass of it and of
  ``deepspeed.accelerator.DeepSpeedAccelerator``, made with the first instance (the generated
  class itself imports nothing of DeepSpeed);
- ``install``: hands DeepSpeed an instance, before DeepSpeed is imported where it is not yet
  (``_InstallOnImport``), so that what DeepSpeed binds at import (its op builder classes) is
  the generated accelerator's;
- ``unavailable_op_builder``: the op builders a generated accelerator hands out.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from stratcore.exceptions import MisconfigurationError
from stratcore.process_group import import_group_defaults, release_process_group_at_exit

if TYPE_CHECKING:
    from stratcore.accelerator import Accelerator


class GeneratedAccelerator(Protocol):
    """What this module needs of a generated DeepSpeed accelerator class (a subclass of
    ``base.DeepSpeedAcceleratorBase``, which imports this module): the stratcore accelerator
    whose facts it states."""

    spec: ClassVar[type[Accelerator]]


#: DeepSpeed's module that holds the accelerator in use (``get_accelerator``, ``set_accelerator``).
REAL_ACCELERATOR = "deepspeed.accelerator.real_accelerator"

#: Stratcore accelerator class -> the DeepSpeed accelerator class generated for it.
GENERATED: dict[type[Accelerator], type[GeneratedAccelerator]] = {}


def deepspeed_class(cls: type[GeneratedAccelerator]) -> type[GeneratedAccelerator]:
    """The class DeepSpeed sees for ``cls``: ``cls`` and ``DeepSpeedAccelerator``, made once
    (imports DeepSpeed's accelerator module). DeepSpeed's abstract-method check runs when it is
    instantiated."""
    bound: type[GeneratedAccelerator] | None = cls.__dict__.get("_deepspeed_class")
    if bound is None:
        from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator

        namespace: dict[str, Any] = {"__module__": cls.__module__, "__doc__": cls.__doc__}
        namespace["__qualname__"] = cls.__qualname__
        bound = type(DeepSpeedAccelerator)(cls.__name__, (cls, DeepSpeedAccelerator), namespace)
        setattr(bound, "_deepspeed_class", bound)  # noqa: B010 - marks it as DeepSpeed's
        setattr(cls, "_deepspeed_class", bound)  # noqa: B010
    return bound


def install(cls: type[GeneratedAccelerator]) -> None:
    """Make DeepSpeed train on ``cls`` (``DeepSpeedAcceleratorBase.install``).

    DeepSpeed creates the process group of a script that calls ``deepspeed.initialize``: as
    around the groups stratcore's strategies create, the modules that would keep it alive are
    imported before it exists, and it is destroyed when the process ends
    (``stratcore.process_group``).
    """
    from stratcore.parallel import ParallelStrategyBase

    from .. import process_groups  # noqa: F401 - registers DeepSpeed's release

    import_group_defaults(ParallelStrategyBase.group_default_modules)
    release_process_group_at_exit()
    real = sys.modules.get(REAL_ACCELERATOR)
    if real is None:
        _InstallOnImport.arrange(cls)
        return
    current = getattr(real, "ds_accelerator", None)
    if not (isinstance(current, cls) and type(current).spec is cls.spec):
        real.set_accelerator(cls())


@functools.cache
def unavailable_op_builder(class_name: str, device_type: str) -> type:
    """An op builder named ``class_name`` that reports itself unavailable: DeepSpeed skips it
    where it can, and says why where it cannot."""
    from deepspeed.ops.op_builder.builder import OpBuilder

    def refuse(self: Any, verbose: bool = False) -> Any:
        raise MisconfigurationError(
            f"DeepSpeed's {class_name} op is built for DeepSpeed's own accelerators, not for "
            f"{device_type!r} devices: train with a torch.optim optimizer (or the config's "
            "optimizer with 'torch_adam': true) instead of DeepSpeed's fused and CPU optimizers"
        )

    namespace = {
        "__module__": __name__,
        "NAME": class_name,
        "BUILD_VAR": f"DS_BUILD_{class_name.upper()}",
        "__init__": lambda self, name=None: OpBuilder.__init__(self, name or class_name),
        "absolute_name": lambda self: f"deepspeed.ops.{class_name}",
        "sources": lambda self: [],
        "is_compatible": lambda self, verbose=False: False,
        "load": refuse,
        "jit_load": refuse,
    }
    return type(class_name, (OpBuilder,), namespace)


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """Hands DeepSpeed an accelerator as soon as DeepSpeed's accelerator module is executed,
    before any of DeepSpeed asks for one; one import, then it removes itself."""

    _pending: ClassVar[_InstallOnImport | None] = None

    def __init__(self, accelerator: type[GeneratedAccelerator]) -> None:
        self.accelerator = accelerator

    @classmethod
    def arrange(cls, accelerator: type[GeneratedAccelerator]) -> None:
        """Install ``accelerator`` when DeepSpeed is imported (the latest call wins)."""
        if cls._pending is None:
            cls._pending = cls(accelerator)
            sys.meta_path.insert(0, cls._pending)
        cls._pending.accelerator = accelerator

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != REAL_ACCELERATOR:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return None  # the import system goes on to the next finder
        sys.meta_path.remove(self)
        type(self)._pending = None
        loader, accelerator = spec.loader, self.accelerator
        execute = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            module.set_accelerator(accelerator())

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
