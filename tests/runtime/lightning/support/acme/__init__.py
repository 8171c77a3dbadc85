"""A hand-made stand-in for a generated package: the made-up CPU-backed device 'acme'.

Here are its stratcore-side classes (what stratgen would generate from a spec: facts as class
attributes on stratcore bases) and the hooks they name, which count their calls. The
Lightning-side glue is in ``acme.lightning_pytorch`` and ``acme.lightning_fabric``.
"""

from __future__ import annotations

from typing import ClassVar

from stratcore.accelerator import Accelerator
from stratcore.collectives import CollectiveBackend
from stratcore.environment import ClusterEnvironmentBase, Condition, ValueSource
from stratcore.launchers import Launcher, PopenLauncher
from stratcore.parallel import ParallelStrategyBase

#: Calls of each hook in this process.
CALLS = {"init": 0, "after_backward": 0, "after_optimizer_step": 0, "set_device": 0}


def register() -> None:
    """The backend's init hook (a device plugin would register its backend here)."""
    CALLS["init"] += 1


def after_backward() -> None:
    CALLS["after_backward"] += 1


def after_optimizer_step() -> None:
    CALLS["after_optimizer_step"] += 1


def set_device(device: object) -> None:
    CALLS["set_device"] += 1


#: Gloo underneath, but 'acme' claims only a native sum and cannot reduce int64.
ACME_BACKEND = CollectiveBackend(
    "gloo",
    reduce_ops=frozenset({"sum"}),
    casts={"int64": "float32"},
    init_hook="acme:register",
)


class AcmeAccelerator(Accelerator):
    """Made-up accelerator 'acme': processes on the CPU."""

    name: ClassVar[str] = "acme"
    device_type: ClassVar[str] = "cpu"
    indexed: ClassVar[bool] = False
    backend: ClassVar[CollectiveBackend] = ACME_BACKEND
    default_precision: ClassVar[str] = "32-true"
    supported_precisions: ClassVar[tuple[str, ...]] = ("32-true", "64-true", "bf16-mixed")
    auto_devices: ClassVar[int | None] = 2
    set_device_hook: ClassVar[str | None] = "acme:set_device"
    after_backward_hook: ClassVar[str | None] = "acme:after_backward"
    after_optimizer_step_hook: ClassVar[str | None] = "acme:after_optimizer_step"


class AcmeParallelStrategy(ParallelStrategyBase):
    """DistributedDataParallel over the acme backend, one process per acme device."""

    name: ClassVar[str | None] = "acme_parallel"
    wrapper: ClassVar[str] = "ddp"
    launcher_class: ClassVar[type[Launcher]] = PopenLauncher
    backend: ClassVar[CollectiveBackend | None] = None  # the accelerator's
    default_precision: ClassVar[str | None] = "bf16-mixed"
    # 64-true is the strategy's but not the accelerator's: only 32-true and bf16-mixed remain.
    supported_precisions: ClassVar[tuple[str, ...]] = ("32-true", "bf16-mixed", "16-true")
    cluster: ClassVar[tuple[str, ...]] = ("acme",)
    accelerators: ClassVar[tuple[str, ...]] = ("acme",)


class AcmeEnvironment(ClusterEnvironmentBase):
    """Processes started by the made-up acme scheduler, which sets ACME_JOB_ID."""

    name: ClassVar[str | None] = "acme"
    detect_condition: ClassVar[Condition] = Condition(all_set=("ACME_JOB_ID",))
    world_size_source: ClassVar[ValueSource] = ValueSource(env=("ACME_NTASKS",))
    global_rank_source: ClassVar[ValueSource] = ValueSource(env=("ACME_RANK",))
    local_rank_source: ClassVar[ValueSource] = ValueSource(env=("ACME_LOCAL_RANK",))
    node_rank_source: ClassVar[ValueSource] = ValueSource(default=0)
    main_address_source: ClassVar[ValueSource] = ValueSource(default="127.0.0.1")
    main_port_source: ClassVar[ValueSource] = ValueSource(env=("ACME_PORT",), default=29577)
