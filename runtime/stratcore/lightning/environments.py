"""``EnvironmentAdapter``: Lightning's ClusterEnvironment API over a stratcore environment spec.

A generated Lightning environment is::

    class SLURMEnvironment(EnvironmentAdapter, lightning.fabric.plugins.environments.ClusterEnvironment):
        spec = stratlib.environments.slurm.SLURMEnvironment

Lightning's ``lightning.pytorch`` uses Fabric's environment classes, so one generated class
serves the Trainer and Fabric. Every method delegates to an instance of ``spec`` (a stratcore
``ClusterEnvironmentBase`` subclass, which has the same method names).
"""

from __future__ import annotations

from typing import Any, ClassVar

from . import check_lightning_version

check_lightning_version()

from ..environment import ClusterEnvironmentBase  # noqa: E402

__all__ = ["EnvironmentAdapter"]


class EnvironmentAdapter:
    """Mixin placed before Lightning's ``ClusterEnvironment``; see the module documentation."""

    spec: ClassVar[type[ClusterEnvironmentBase]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spec_environment: ClusterEnvironmentBase = self.spec()

    @classmethod
    def detect(cls) -> bool:
        """Whether this process runs under the environment (the spec's detection rule)."""
        return cls.spec.detect()

    @property
    def creates_processes_externally(self) -> bool:
        """Whether the scheduler, not Lightning, started the processes (the spec's condition)."""
        return self.spec_environment.creates_processes_externally

    @property
    def main_address(self) -> str:
        """Address of the node of rank 0, read as the spec says."""
        return self.spec_environment.main_address

    @property
    def main_port(self) -> int:
        """Port of the rendezvous on the node of rank 0, read as the spec says."""
        return self.spec_environment.main_port

    def world_size(self) -> int:
        """Number of processes in the job."""
        return self.spec_environment.world_size()

    def set_world_size(self, size: int) -> None:
        """Set the number of processes where the environment lets Lightning decide it."""
        self.spec_environment.set_world_size(size)

    def global_rank(self) -> int:
        """Rank of this process among all processes."""
        return self.spec_environment.global_rank()

    def set_global_rank(self, rank: int) -> None:
        """Set this process's rank where the environment lets Lightning decide it."""
        self.spec_environment.set_global_rank(rank)

    def local_rank(self) -> int:
        """Rank of this process on its node."""
        return self.spec_environment.local_rank()

    def node_rank(self) -> int:
        """Rank of this process's node."""
        return self.spec_environment.node_rank()

    def device(self) -> str | None:
        """The device the environment gave this process ('cuda:1'), where it says (Ray)."""
        return self.spec_environment.device()

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        """Refuse devices and nodes that contradict what the scheduler started."""
        self.spec_environment.validate_settings(num_devices, num_nodes)

    def teardown(self) -> None:
        """Release what the environment holds, as the spec's environment does."""
        self.spec_environment.teardown()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
