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
        return self.spec_environment.creates_processes_externally

    @property
    def main_address(self) -> str:
        return self.spec_environment.main_address

    @property
    def main_port(self) -> int:
        return self.spec_environment.main_port

    def world_size(self) -> int:
        return self.spec_environment.world_size()

    def set_world_size(self, size: int) -> None:
        self.spec_environment.set_world_size(size)

    def global_rank(self) -> int:
        return self.spec_environment.global_rank()

    def set_global_rank(self, rank: int) -> None:
        self.spec_environment.set_global_rank(rank)

    def local_rank(self) -> int:
        return self.spec_environment.local_rank()

    def node_rank(self) -> int:
        return self.spec_environment.node_rank()

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        self.spec_environment.validate_settings(num_devices, num_nodes)

    def teardown(self) -> None:
        self.spec_environment.teardown()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
