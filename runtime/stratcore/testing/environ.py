"""Which generated package the test support names strategies of, and environments
without the variables of a cluster."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..contract import ENVIRONMENT_VALUES, LAYOUT_VALUES
from ..launchers.base import ERROR_FILE_ENV, LAUNCH_FILE_ENV, PARENT_PID_ENV
from ..registry import Registry, loaded_packages, package_registry

#: Variables a scheduler or launcher may have set; tests start without them.
CLUSTER_VARIABLES = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "NODE_RANK",
    "GROUP_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_ERROR_FILE",
    "TORCHELASTIC_USE_AGENT_STORE",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_JOB_ID",
    "SLURM_JOB_NAME",
    "SLURM_NODELIST",
    "LSB_JOBID",
    "LSB_DJOB_RANKFILE",
    "JSM_NAMESPACE_RANK",
    "JSM_NAMESPACE_SIZE",
    "JSM_NAMESPACE_LOCAL_RANK",
    "KUBERNETES_PORT",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_SIZE",
    "PMI_RANK",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    ERROR_FILE_ENV,
    LAUNCH_FILE_ENV,
    PARENT_PID_ENV,
)

#: Marks every process of one scenario run, so that a test can find any that outlived it.
RUN_MARKER_ENV = "STRATLIB_TEST_RUN"

_package: str | None = None


def use_package(package: str) -> None:
    """Make ``package`` (a generated package's import name) the one whose registry names the
    scenarios and assertions below use; a generated ``conftest.py`` calls it."""
    global _package
    _package = package


def package_name() -> str:
    """The package chosen with [`use_package`][stratcore.testing.environ.use_package], or the only generated package loaded."""
    if _package is not None:
        return _package
    loaded = loaded_packages()
    if len(loaded) != 1:
        raise RuntimeError(
            "call stratcore.testing.use_package(NAME) first: "
            + (
                f"packages {', '.join(loaded)} are loaded"
                if loaded
                else "no generated package is loaded"
            )
        )
    return loaded[0]


def package_registry_in_use() -> Registry:
    """The registry of the generated package the tests run against."""
    return package_registry(package_name())


#: The folder holding the stratcore package that runs this.
RUNTIME_ROOT = Path(__file__).resolve().parents[2]


def cluster_variables() -> frozenset[str]:
    """The variables above and every variable a cluster environment of this package reads."""
    names = set(CLUSTER_VARIABLES)
    environments = {
        environment
        for package in loaded_packages()
        for environment in package_registry(package).cluster_environments.values()
    }
    for environment in environments:
        for condition in (
            environment.detect_condition,
            environment.creates_processes_externally_condition,
        ):
            names.update(
                condition.all_set, condition.any_set, condition.none_set, condition.not_equal
            )
        for key in (*ENVIRONMENT_VALUES, *LAYOUT_VALUES):
            names.update(getattr(environment, f"{key}_source").env)
    return frozenset(names)


def isolated_environment(monkeypatch: Any) -> None:
    """Remove cluster and rendezvous variables (for a pytest ``monkeypatch``)."""
    for name in cluster_variables():
        monkeypatch.delenv(name, raising=False)


def package_environ(package: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """[`clean_environ`][stratcore.testing.environ.clean_environ], with the runtime and ``package`` (a generated package's import
    name) first on the PYTHONPATH: a new process imports both as this one does, installed or
    not."""
    import importlib

    environ = clean_environ(extra)
    module = importlib.import_module(package)
    parents = {str(RUNTIME_ROOT), str(Path(str(module.__file__)).resolve().parents[1])}
    environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [*sorted(parents), environ.get("PYTHONPATH")])
    )
    return environ


#: OpenMP threads of each process a test starts, unless the environment sets its own.
TEST_PROCESS_THREADS = "1"


def clean_environ(extra: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of os.environ without cluster variables, with ``extra`` added.

    A process started with it imports this stratcore, installed or not: its folder ends the
    PYTHONPATH (after any ``extra`` one), ahead of an installed copy elsewhere. It runs one
    OpenMP thread (``TEST_PROCESS_THREADS``) unless OMP_NUM_THREADS says otherwise: a test
    suite runs several processes per core, and their thread pools would spin against each
    other (torchrun gives its processes one thread for the same reason)."""
    names = cluster_variables()
    env = {k: v for k, v in os.environ.items() if k not in names}
    env.setdefault("OMP_NUM_THREADS", TEST_PROCESS_THREADS)
    env.update(extra or {})
    runtime = str(RUNTIME_ROOT)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if runtime not in paths:
        env["PYTHONPATH"] = os.pathsep.join([*paths, runtime])
    return env
