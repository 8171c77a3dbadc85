"""Behaviour of strategies that train with several processes.

Ranks and the world size come from the cluster environment. Collectives run on a
torch.distributed process group created in ``setup_environment`` with the strategy's backend
(the accelerator's by default), and honour what that backend can do natively.

The process group belongs to the process, not to one strategy (``stratcore.process_group``): a
script that launches several times (training, then evaluation) reuses it, and a group someone
else created (Ray Train, a script's own ``init_process_group``) is reused where it fits and
never destroyed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator, Mapping, Sequence
from datetime import timedelta
from typing import Any, ClassVar

import torch
import torch.distributed as dist

from . import collectives, process_group
from .accelerator import Accelerator
from .checkpoints.io import CheckpointIO
from .collectives import CollectiveBackend
from .environment import ClusterEnvironmentBase
from .exceptions import CollectiveTimeoutError, MisconfigurationError
from .imports import import_object, require
from .launchers import ExternalLauncher, Launcher
from .precision.base import PrecisionBase
from .registry import registry_of
from .rendezvous import joined_store
from .strategy import StrategyBase

#: Seconds the processes of a job may take to join its process group, when the strategy's
#: timeout is shorter (torch's default timeout). Processes start at different speeds (a busy
#: machine, a slow file system); a short collective timeout should not fail a job whose last
#: rank is still importing torch. A rank that dies before joining ends the job through its
#: launcher, not through this wait.
JOIN_TIMEOUT = 1800.0


def _can_set_group_timeout() -> bool:
    return hasattr(dist.distributed_c10d, "_set_pg_timeout")


def _set_group_timeout(seconds: float) -> None:
    """Make the collectives of the default group wait ``seconds`` (where torch can)."""
    if _can_set_group_timeout():
        with contextlib.suppress(Exception):
            dist.distributed_c10d._set_pg_timeout(timedelta(seconds=seconds))


def share_cpu_threads(processes_per_node: int) -> None:
    """Give each process on this machine its share of the cores as torch threads.

    Left alone, every process sizes its thread pool to the whole machine, and the pools spin
    against each other: small steps get many times slower. torchrun sets one thread per
    process for the same reason. A user's OMP_NUM_THREADS always wins.
    """
    if processes_per_node <= 1 or "OMP_NUM_THREADS" in os.environ:
        return
    threads = max(1, (os.cpu_count() or 1) // processes_per_node)
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)


def choose_device(
    devices: Sequence[torch.device], given: str | None, local_rank: int
) -> torch.device:
    """The device of ``devices`` a process trains on: ``given``, the one its cluster
    environment gave it (``ClusterEnvironmentBase.device``), where that is among ``devices``
    (Ray Train makes a GPU worker's device visible beside those of the other workers on its
    node, and names its own); else the one at its local rank. Where a process sees only its own
    device (Ray's workers of devices whose visible-devices variable it sets to one device),
    that is the only one."""
    if given is not None:
        with contextlib.suppress(RuntimeError):
            device = torch.device(given)
            if device.index is not None and device in devices:
                return device
    return devices[local_rank % len(devices)]


class ParallelStrategyBase(StrategyBase):
    """Multi-process training; see the module documentation."""

    launcher_class: ClassVar[type[Launcher]] = ExternalLauncher
    one_process_per_node: ClassVar[bool] = False

    #: Seconds a collective may wait for its peers.
    timeout: float = 1800.0
    #: Backend name overriding the strategy's and the accelerator's.
    process_group_backend: str | None = None
    #: Modules whose functions take the default group as a default argument value: imported
    #: before the group exists (see ``import_group_defaults``).
    group_default_modules: tuple[str, ...] = ("torch.distributed.nn.functional",)

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        parallel_devices: list[torch.device] | None = None,
        cluster_environment: ClusterEnvironmentBase | None = None,
        checkpoint_io: CheckpointIO | None = None,
        precision_plugin: PrecisionBase | None = None,
        num_nodes: int = 1,
    ) -> None:
        super().__init__(
            accelerator=accelerator, checkpoint_io=checkpoint_io, precision_plugin=precision_plugin
        )
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
            raise MisconfigurationError(
                f"num_nodes={num_nodes!r} is not allowed; use a positive number"
            )
        self._parallel_devices = list(parallel_devices) if parallel_devices is not None else None
        self._cluster_environment = cluster_environment
        self.num_nodes = num_nodes

    # -- composition ---------------------------------------------------------------------

    @property
    def cluster_environment(self) -> ClusterEnvironmentBase:
        if self._cluster_environment is None:
            self._cluster_environment = registry_of(type(self)).detect_environment(type(self))
        return self._cluster_environment

    @cluster_environment.setter
    def cluster_environment(self, environment: ClusterEnvironmentBase) -> None:
        self._cluster_environment = environment

    @property
    def has_parallel_devices(self) -> bool:
        """Whether devices were given (else ``parallel_devices`` are every device found)."""
        return self._parallel_devices is not None

    @property
    def parallel_devices(self) -> list[torch.device]:
        if self._parallel_devices is None:
            accelerator = self.accelerator
            self._parallel_devices = accelerator.get_parallel_devices(
                accelerator.parse_devices("auto")
            )
        return self._parallel_devices

    @parallel_devices.setter
    def parallel_devices(self, devices: list[torch.device]) -> None:
        self._parallel_devices = list(devices)

    @property
    def num_processes(self) -> int:
        """Processes per node: one per device, or one where ``one_process_per_node``."""
        return 1 if self.one_process_per_node else len(self.parallel_devices)

    @property
    def collective_backend(self) -> CollectiveBackend:
        """The backend the process group uses, with its capabilities."""
        accelerator = self.accelerator
        backend = self.backend or accelerator.backend
        chosen = self.process_group_backend
        # The name torch knows the strategy's own backend by stands for that backend (two
        # vendors' libraries may register the same name); any other name is looked up.
        if chosen is not None and chosen not in (backend.name, backend.torch_name):
            backend = registry_of(type(self)).backend(chosen)
        return backend.for_device(accelerator.device_type)

    # -- ranks ---------------------------------------------------------------------------

    @property
    def root_device(self) -> torch.device:
        return choose_device(
            self.parallel_devices, self.cluster_environment.device(), self.local_rank
        )

    @property
    def global_rank(self) -> int:
        return self.cluster_environment.global_rank()

    @property
    def local_rank(self) -> int:
        return self.cluster_environment.local_rank()

    @property
    def node_rank(self) -> int:
        return self.cluster_environment.node_rank()

    @property
    def world_size(self) -> int:
        environment = self.cluster_environment
        if environment.settable and not environment.creates_processes_externally:
            # Before launch (or in the launching process), the strategy's own launcher decides
            # how many processes there will be; a WORLD_SIZE left in the environment does not.
            return self.num_nodes * self.num_processes
        return environment.world_size()

    def configure_ranks(self) -> None:
        """Tell an environment the strategy's own launcher fills in who is who."""
        environment = self.cluster_environment
        environment.set_world_size(self.num_nodes * self.num_processes)
        environment.set_global_rank(self.node_rank * self.num_processes + self.local_rank)

    # -- configuration -------------------------------------------------------------------

    def validate_configuration(self) -> None:
        super().validate_configuration()
        timeout = self.timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise MisconfigurationError(
                f"timeout={timeout!r} is not allowed; give a positive number of seconds"
            )
        name = self.process_group_backend
        if name is not None:
            known = registry_of(type(self)).known_backends()
            if name not in known:
                raise MisconfigurationError(
                    f"process_group_backend={name!r} is not a collective backend; use one of {', '.join(known)}"
                )
            if not dist.is_backend_available(self.collective_backend.process_group_name):
                raise MisconfigurationError(
                    f"process_group_backend={name!r} is not available in this torch build"
                    f" (available: {', '.join(b for b in known if dist.is_backend_available(b))})"
                )

    # -- environment ---------------------------------------------------------------------

    def setup_environment(self) -> None:
        if self._environment_ready:
            return
        self.configure_ranks()
        share_cpu_threads(self.num_processes)
        super().setup_environment()
        self.setup_distributed()

    def setup_distributed(self) -> None:
        """Create the default process group, or reuse the one that exists: one an earlier launch
        created, or one someone else did (Ray Train, the script's own ``init_process_group``)."""
        backend = self.collective_backend
        if dist.is_initialized() and not self._replace_process_group(backend.process_group_name):
            # Someone else's group is theirs: neither a failed launch nor the end of the process
            # destroys it.
            process_group.adopt_existing_group()
            # This launch's modules, imported after the group exists, take it as a default:
            # the release lets go of them (process_group.release_process_group).
            process_group.GROUP_DEFAULT_MODULES.update(self.group_default_modules)
            return
        require(backend.requires, f"backend {backend.name!r}")
        backend.register()
        if backend.init_hook is not None:
            import_object(backend.init_hook)()
        environment = self.cluster_environment
        address, port = environment.resolved_main_address(), environment.main_port
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = address, str(port)
        # Joining waits for the slowest process to start; the collectives then wait the
        # strategy's timeout (where torch can change a group's timeout after creating it).
        joining = max(self.timeout, JOIN_TIMEOUT) if _can_set_group_timeout() else self.timeout
        with (
            process_group.creating_process_group(self.group_default_modules),
            self.timeouts_reported("connecting the processes", joining),
        ):
            # The store the launcher holds, where it holds one; else the env:// rendezvous.
            store = joined_store(address, port, self.world_size, joining)
            dist.init_process_group(
                backend.process_group_name,
                rank=self.global_rank,
                world_size=self.world_size,
                timeout=timedelta(seconds=joining),
                store=store,
            )
        if joining != self.timeout:
            _set_group_timeout(self.timeout)

    def _replace_process_group(self, backend: str) -> bool:
        """Whether the existing group must be replaced (else it is reused); raise if it cannot
        serve this launch. Only a group of one process that the runtime created is replaced; any
        other that does not fit is refused and left as it is."""
        existing = process_group.existing_group()
        assert existing is not None
        group_backend, size, rank = existing
        if (size, rank) == (self.world_size, self.global_rank) and process_group.backend_serves(
            group_backend, backend
        ):
            if process_group.created_by_runtime():
                _set_group_timeout(self.timeout)  # this launch's timeout, where torch can
            return False
        if size == 1 and process_group.created_by_runtime():  # nobody else uses it
            process_group.release_process_group()
            return True
        environment = self.cluster_environment
        process_group.refuse_existing_group(
            type(self).__name__,
            backend,
            self.world_size,
            self.global_rank,
            environment=type(environment).__name__ if not environment.settable else None,
        )

    def run_worker(
        self, function: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> Any:
        # Timeouts can also surface outside the collectives below, e.g. in DDP's gradient
        # reduction during backward.
        with self.timeouts_reported("a collective"):
            try:
                return super().run_worker(function, args, kwargs)
            except BaseException:
                # Its peers are stopping: a group the runtime created cannot be used again.
                process_group.release_process_group()
                raise

    @contextlib.contextmanager
    def timeouts_reported(
        self, operation: str, timeout: float | None = None
    ) -> Generator[None, None, None]:
        """Turn a backend's timeout error inside the block into a CollectiveTimeoutError that
        says what timed out and why (the backend's error stays attached as the cause);
        ``timeout`` is what the block waited, by default the strategy's timeout."""
        try:
            yield
        except RuntimeError as exc:
            if not collectives.is_timeout_error(exc):
                raise
            rank = self._safe_rank()
            waited = self.timeout if timeout is None else timeout
            option = "the strategy's timeout option" if waited == self.timeout else "JOIN_TIMEOUT"
            raise CollectiveTimeoutError(
                f"rank {rank}: {operation} timed out after {waited:g} s waiting for the other "
                f"processes ({option}); another process hangs, is far slower, or died",
                rank=rank,
                operation=operation,
                timeout=waited,
            ) from exc

    def _safe_rank(self) -> int | None:
        try:
            return self.global_rank
        except MisconfigurationError:
            return None

    # -- collectives ---------------------------------------------------------------------

    @staticmethod
    def _distributed() -> bool:
        return dist.is_available() and dist.is_initialized()

    def _on_root_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` where the collectives run: a tensor on another type of device (a metric
        kept on the CPU of a process that trains on an accelerator) goes to this process's
        device, whose backend may serve no other device type; the result goes back."""
        device = self.root_device
        return tensor if tensor.device.type == device.type else tensor.to(device)

    def reduce(self, tensor: Any, group: Any = None, reduce_op: Any = "mean") -> Any:
        """Reduce over every process; tensors are reduced on this process's device and come
        back on their own."""
        if not isinstance(tensor, torch.Tensor):
            return collectives.reduce_each(
                tensor, self.root_device, lambda t: self.reduce(t, group, reduce_op)
            )
        if not self._distributed():
            collectives.normalize_reduce_op(reduce_op)
            return tensor
        with self.timeouts_reported("reduce"):
            reduced = collectives.all_reduce(
                self._on_root_device(tensor), reduce_op, self.collective_backend, group
            )
        return reduced.to(tensor.device)

    def all_gather(
        self, tensor: torch.Tensor, group: Any = None, sync_grads: bool = False
    ) -> torch.Tensor:
        """Gather from every process into a new leading dimension, on this process's device;
        the result comes back on the tensor's own."""
        if not self._distributed():
            return tensor.unsqueeze(0) if sync_grads else tensor.detach().unsqueeze(0)
        with self.timeouts_reported("all_gather"):
            gathered = collectives.all_gather(
                self._on_root_device(tensor), self.collective_backend, group, sync_grads
            )
        return gathered.to(tensor.device)

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        if not self._distributed():
            return obj
        device = self.root_device if self.collective_backend.process_group_name == "nccl" else None
        with self.timeouts_reported("broadcast"):
            return collectives.broadcast_object(obj, src, device=device)

    def barrier(self, name: str | None = None) -> None:
        if not self._distributed():
            return
        with self.timeouts_reported(f"barrier {name!r}" if name else "barrier"):
            if self.collective_backend.process_group_name == "nccl":
                dist.barrier(device_ids=[self.root_device.index or 0])
            else:
                dist.barrier()

    @contextlib.contextmanager
    def block_backward_sync(self) -> Generator[None, None, None]:
        no_sync = getattr(self._model, "no_sync", None)
        if callable(no_sync):
            with no_sync():
                yield
        else:
            yield

    # -- teardown ------------------------------------------------------------------------

    def teardown(self) -> None:
        super().teardown()
        if self._cluster_environment is not None:
            self._cluster_environment.teardown()


class OneProcessStrategyBase(ParallelStrategyBase):
    """One process drives every device (DataParallel, PopTorch's replicas on IPUs): no process
    group, no launched processes, rank 0 of a world of one (as ``StrategyBase`` says); the
    subclass wraps or compiles the model."""

    one_process_per_node: ClassVar[bool] = True
    global_rank = StrategyBase.global_rank
    local_rank = StrategyBase.local_rank
    world_size = StrategyBase.world_size

    @property
    def root_device(self) -> torch.device:
        return self.parallel_devices[0]

    def configure_ranks(self) -> None:
        """Nothing to tell the environment: there is one process."""

    def setup_distributed(self) -> None:
        """One process needs no process group."""
