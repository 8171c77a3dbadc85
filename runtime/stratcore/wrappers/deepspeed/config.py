"""DeepSpeed's config and installation: reading and completing a config, loading DeepSpeed and
building its ops one process at a time."""

from __future__ import annotations

import contextlib
import copy
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from stratcore.exceptions import MisconfigurationError
from stratcore.imports import import_optional

DS_ACCELERATOR_ENV = "DS_ACCELERATOR"
ZERO_STAGES = (0, 1, 2, 3)
#: Settings the strategy adds to every config that does not set them itself.
CONFIG_DEFAULTS: dict[str, Any] = {
    # DeepSpeed clips the gradient norm to 1.0 unless told otherwise; training should only
    # differ from plain PyTorch where the user asks for it.
    "gradient_clipping": 0.0,
    # Optimizers passed to ``setup`` are ordinary torch optimizers.
    "zero_allow_untested_optimizer": True,
    "zero_force_ds_cpu_optimizer": False,
    # ``optimizer_step`` is the accumulation boundary: every backward before it accumulates.
    "managed_gradient_accumulation": False,
}
#: Ops DeepSpeed compiles on first use for a config's optimizer: (type, offloaded) -> builder.
_OPTIMIZER_OPS: dict[tuple[str, bool], str] = {
    ("adam", False): "FusedAdamBuilder",
    ("adamw", False): "FusedAdamBuilder",
    ("adam", True): "CPUAdamBuilder",
    ("adamw", True): "CPUAdamBuilder",
    ("adagrad", True): "CPUAdagradBuilder",
    ("lion", False): "FusedLionBuilder",
    ("lion", True): "CPULionBuilder",
}


def import_deepspeed(user: str = "DeepSpeedStrategy") -> ModuleType:
    """Import deepspeed, or raise MissingDependencyError saying how to install it."""
    return import_optional("deepspeed", user, "pip install deepspeed")


def read_config(config: Mapping[str, Any] | str | os.PathLike[str] | None) -> dict[str, Any]:
    """A private copy of a DeepSpeed config given as a mapping or as the path of a JSON file."""
    if config is None:
        return {}
    if isinstance(config, Mapping):
        return copy.deepcopy(dict(config))
    if not isinstance(config, str | os.PathLike):
        raise MisconfigurationError(
            f"config={config!r} is not allowed; give a mapping or the path of a JSON file"
        )
    path = Path(config)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MisconfigurationError(
            f"config={os.fspath(config)!r}: there is no such file"
        ) from None
    except OSError as exc:
        raise MisconfigurationError(
            f"config={os.fspath(config)!r} cannot be read: {exc.strerror}"
        ) from None
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MisconfigurationError(
            f"config={os.fspath(config)!r} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"
        ) from None
    if not isinstance(loaded, dict):
        raise MisconfigurationError(
            f"config={os.fspath(config)!r} must hold a JSON object, found {type(loaded).__name__}"
        )
    return loaded


@contextlib.contextmanager
def extension_build_lock(name: str) -> Iterator[None]:
    """Hold a machine-wide lock while the torch extension ``name`` is built or loaded.

    DeepSpeed compiles some ops the first time a process needs them. When every rank of a job
    starts at once, they would all compile into the same folder; under this lock the first
    one compiles and the others load the finished library.
    """
    from torch.utils.cpp_extension import get_default_build_root

    try:
        import fcntl
    except ImportError:  # no advisory locks here; torch's own build lock remains
        yield
        return
    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.build.lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def load_ops_in_turn(builder_names: list[str]) -> None:
    """Build (the first time) and load DeepSpeed's JIT-compiled ops one process at a time."""
    from deepspeed.accelerator import get_accelerator

    for name in builder_names:
        builder = get_accelerator().create_op_builder(name)
        if builder is None or not builder.is_compatible(verbose=False):
            continue  # DeepSpeed falls back to plain PyTorch where an op cannot be built
        with extension_build_lock(builder.NAME):
            builder.load(verbose=False)


def offload_section(device: str, nvme_path: str | os.PathLike[str] | None) -> dict[str, Any]:
    """A ``zero_optimization`` offload section for ``device`` ('cpu' or 'nvme')."""
    if device != "nvme":
        return {"device": device}
    return {"device": "nvme", "nvme_path": os.fspath(checked_nvme_path(nvme_path))}


def checked_nvme_path(path: str | os.PathLike[str] | None) -> str | os.PathLike[str]:
    """The folder the 'nvme' offload devices use; a one-line error without one."""
    if path is None:
        raise MisconfigurationError(
            "offloading to NVMe needs nvme_path, a folder on a local NVMe drive "
            "(e.g. nvme_path='/local_nvme'); give it, or offload to 'cpu'"
        )
    if not os.path.isdir(path):
        raise MisconfigurationError(
            f"nvme_path={os.fspath(path)!r} is not an existing folder; give a folder on a "
            "local NVMe drive"
        )
    return path


def merge_precision(config: dict[str, Any], sections: dict[str, Any], precision: str) -> None:
    """Put the precision plugin's ``sections`` (fp16, bf16) into ``config``; a config that
    enables another precision than ``precision`` is refused."""
    enabled = {key for key in ("fp16", "bf16") if section_enabled(config.get(key))}
    if enabled and enabled != set(sections):
        raise MisconfigurationError(
            f"the DeepSpeed config enables {' and '.join(sorted(enabled))} but precision="
            f"{precision!r}; choose the precision with the precision argument "
            "('16-mixed', 'bf16-mixed', ...) or make the config agree with it"
        )
    for key, section in sections.items():
        own = config.get(key)
        config[key] = {**section, **own} if isinstance(own, dict) else section


def ops_to_build(config: dict[str, Any], device_name: str) -> list[str]:
    """The ops DeepSpeed compiles on first use for ``config``, on its accelerator for devices
    ``device_name`` (``get_accelerator().device_name()``)."""
    # deepspeed.comm loads ShareMemComm on the CPU accelerator only; other accelerators have
    # no such op (a builder that refuses to load, where they hand one out).
    names = ["ShareMemCommBuilder"] if device_name == "cpu" else []
    optimizer = config.get("optimizer")
    if isinstance(optimizer, dict) and isinstance(optimizer.get("type"), str):
        params = optimizer.get("params") or {}
        if not params.get("torch_adam", False):
            offloaded = offloads(config["zero_optimization"], "offload_optimizer")
            op = _OPTIMIZER_OPS.get((optimizer["type"].lower(), offloaded))
            if op is not None:
                names.append(op)
    return names


def check_offloads(zero: Mapping[str, Any], stage: int) -> None:
    """Raise where the ZeRO section offloads what its ``stage`` does not partition."""
    if offloads_to_nvme(zero, "offload_optimizer") and stage != 3:
        raise MisconfigurationError(
            f"offloading the optimizer to NVMe needs ZeRO stage 3; stage {stage} was chosen "
            "(use 'deepspeed_stage_3_offload_nvme' or zero_stage=3)"
        )
    if offloads(zero, "offload_optimizer") and stage == 0:
        raise MisconfigurationError(
            "offload_optimizer needs ZeRO stage 1, 2 or 3, which partition the optimizer; "
            "stage 0 was chosen"
        )
    if offloads(zero, "offload_param") and stage != 3:
        raise MisconfigurationError(
            f"offload_parameters needs ZeRO stage 3, which partitions the parameters; stage {stage} "
            "was chosen (use 'deepspeed_stage_3_offload' or zero_stage=3)"
        )


def offloads(zero: Mapping[str, Any], key: str) -> bool:
    """Whether a ZeRO config offloads the section ``key`` (to the CPU or NVMe)."""
    section = zero.get(key)
    return isinstance(section, Mapping) and section.get("device", "none") not in (None, "none")


def offloads_to_nvme(zero: Mapping[str, Any], key: str) -> bool:
    """Whether a ZeRO config offloads the section ``key`` to NVMe."""
    section = zero.get(key)
    return isinstance(section, Mapping) and section.get("device") == "nvme"


def section_enabled(section: Any) -> bool:
    """Whether a config section is a mapping with ``enabled`` true."""
    return isinstance(section, Mapping) and bool(section.get("enabled", False))


def cpu_has_fp16_kernels() -> bool:
    """Whether torch's oneDNN has float16 kernels for this CPU: what DeepSpeed's CPU
    accelerator asks before it trains in float16."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_fp16_supported())
    except (AttributeError, RuntimeError):  # a torch without the query: no float16 kernels
        return False


def check_deepspeed_accelerator(device_type: str, selection: str, precision: str) -> None:
    """That DeepSpeed, imported, runs on an accelerator for ``device_type`` (which ``selection``
    selects, e.g. 'DS_ACCELERATOR=<name>') and can train in ``precision`` there."""
    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    if accelerator.device_name() != device_type:
        raise MisconfigurationError(
            f"DeepSpeed runs on its {accelerator.device_name()!r} accelerator, but the strategy "
            f"trains on {device_type!r}; {selection} before deepspeed is imported selects the "
            "right one"
        )
    if precision.startswith("16") and not accelerator.is_fp16_supported():
        raise MisconfigurationError(fp16_refused(precision, device_type))


def fp16_refused(precision: str, device_type: str) -> str:
    """The error for a float16 ``precision`` DeepSpeed's accelerator cannot train in here."""
    return (
        f"precision={precision!r}: DeepSpeed's {device_type} accelerator cannot train in "
        "float16 on this machine; use precision='bf16-mixed' or '32-true'"
    )
