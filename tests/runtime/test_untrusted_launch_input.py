"""Launch variables and ``get_strategy``'s arguments are untrusted input: a value out of range,
unreadable or of the wrong kind is one line that names the variable or argument, never a
traceback from deep inside torch, a MemoryError or a hang.

Variables are checked where they are read (``ClusterEnvironmentBase``: ports 1-65535, sizes 1
or more, ranks 0 or more and below the world size); an address is checked to resolve before a
rank connects to it, so that the rank fails at once instead of retrying until its timeout.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from stratcore import testing
from stratcore.testing import watch

import stratlib
from stratlib.registry import REGISTRY
from tests.support import REPO

MisconfigurationError = stratlib.MisconfigurationError
#: A torchrun job of 2 processes, as its second process sees it.
TORCHRUN = {
    "TORCHELASTIC_RUN_ID": "job",
    "WORLD_SIZE": "2",
    "RANK": "1",
    "LOCAL_RANK": "1",
    "LOCAL_WORLD_SIZE": "2",
    "GROUP_RANK": "0",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29400",
}
MPI = {"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}


def _environment(monkeypatch: pytest.MonkeyPatch, **variables: str) -> Any:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    return REGISTRY.detect_environment(stratlib.DDPStrategy)


def _one_line(error: pytest.ExceptionInfo[BaseException], *words: str) -> None:
    message = str(error.value)
    assert "\n" not in message, f"not one line: {message!r}"
    for word in words:
        assert word in message, f"{word!r} is not in {message!r}"


@pytest.mark.parametrize("port", ["99999", "0", "65536", "-1"])
def test_a_port_out_of_range_names_its_variable(monkeypatch: pytest.MonkeyPatch, port: str) -> None:
    environment = _environment(monkeypatch, **{**TORCHRUN, "MASTER_PORT": port})
    with pytest.raises(MisconfigurationError) as error:
        _ = environment.main_port
    _one_line(error, f"MASTER_PORT={port!r}", "1-65535")


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        ({"RANK": "2"}, "RANK='2'"),  # ranks are 0 and 1
        ({"RANK": "-1"}, "RANK='-1'"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE='0'"),
    ],
)
def test_a_rank_outside_the_world_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], named: str
) -> None:
    environment = _environment(monkeypatch, **{**TORCHRUN, **variables})
    with pytest.raises(MisconfigurationError) as error:
        environment.world_size()
        environment.global_rank()
    _one_line(error, named, "out of range")


def test_local_world_size_that_is_no_number_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    environment = _environment(monkeypatch, **MPI, LOCAL_WORLD_SIZE="abc")
    assert type(environment).__name__ == "MPIEnvironment"
    with pytest.raises(MisconfigurationError) as error:
        environment.node_rank()
    _one_line(error, "LOCAL_WORLD_SIZE='abc'")


LSF = {
    "LSB_JOBID": "77",
    "JSM_NAMESPACE_LOCAL_RANK": "0",
    "JSM_NAMESPACE_SIZE": "2",
    "JSM_NAMESPACE_RANK": "0",
}


#: Reads an LSF job's node rank and main address in a fresh process with a bounded heap, and
#: prints what each raised: a rank file that never ends would exhaust memory, a FIFO would
#: wait for a writer forever (the watch fails a process that stops making progress).
READ_RANK_FILE = """
import resource
resource.setrlimit(resource.RLIMIT_DATA, (2 << 30, 2 << 30))
import stratlib
environment = stratlib.LSFEnvironment()
for read in (environment.node_rank, lambda: environment.main_address):
    try:
        read()
    except stratlib.MisconfigurationError as error:
        print(error)
"""


def _env(**variables: str) -> dict[str, str]:
    path = os.pathsep.join([str(REPO / "runtime"), str(REPO / "generated")])
    return testing.clean_environ({**variables, "PYTHONPATH": path})


@pytest.mark.parametrize("kind", ["/dev/zero", "a FIFO"])
def test_a_rank_file_that_is_not_a_regular_file_is_not_read(kind: str, tmp_path: Path) -> None:
    path = "/dev/zero"
    if kind == "a FIFO":
        path = str(tmp_path / "rankfile")
        os.mkfifo(path)
    env = _env(**LSF, LSB_DJOB_RANKFILE=path)
    process = watch.run([sys.executable, "-c", READ_RANK_FILE], env=env, cwd=tmp_path)
    assert process.returncode == 0, process.stderr[-3000:]
    lines = process.stdout.splitlines()
    assert len(lines) == 2, process.stdout
    for line in lines:
        assert f"LSB_DJOB_RANKFILE={path!r}" in line and "not a regular file" in line, line


def test_an_address_that_does_not_resolve_is_named_before_connecting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    environment = _environment(monkeypatch, **{**TORCHRUN, "MASTER_ADDR": "no-such-host.invalid"})
    assert environment.main_address == "no-such-host.invalid"  # the value, as it is given
    with pytest.raises(MisconfigurationError) as error:
        environment.resolved_main_address()
    _one_line(error, "MASTER_ADDR='no-such-host.invalid'", "does not resolve")


def test_a_rank_given_an_address_that_does_not_resolve_fails_at_once(tmp_path: Path) -> None:
    """A real rank of a torchrun job fails naming the variable before it tries to connect:
    torch would retry the connection (saying so on stderr, ``[c10d]``) until the join's
    timeout, half an hour."""
    script = (
        "import stratlib\n"
        "strategy = stratlib.get_strategy('ddp', accelerator='cpu', devices=2)\n"
        "strategy.launch(lambda strategy: None)\n"
    )
    env = _env(**{**TORCHRUN, "MASTER_ADDR": "no-such-host.invalid"})
    job = watch.Job([sys.executable, "-c", script], env=env, cwd=tmp_path)
    try:
        job.wait_for(lambda: "[c10d]" in job.stderr, "the rank to end or to try to connect")
        tried = "[c10d]" in job.stderr
    finally:
        job.kill()
    assert not tried, f"the rank tried to connect to the address:\n{job.stderr[-2000:]}"
    assert job.process.returncode != 0
    last = job.stderr.strip().splitlines()[-1]
    assert "MASTER_ADDR='no-such-host.invalid'" in last and "does not resolve" in last, last


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [("LOCAL_RANK", "abc", "0 or more"), ("LOCAL_RANK", "-2", "0 or more")],
)
def test_a_launch_variable_read_as_a_number_names_itself(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    from stratcore.environment import int_variable

    monkeypatch.setenv(name, value)
    with pytest.raises(MisconfigurationError) as error:
        int_variable(name, 0, 0)
    _one_line(error, f"{name}={value!r}", expected)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"cluster_environment": "no_such_scheduler"}, "cluster_environment='no_such_scheduler'"),
        ({"cluster_environment": 3}, "cluster_environment=3 is not allowed"),
        ({"checkpoint_io": "x"}, "checkpoint_io='x' is not allowed; expected a CheckpointIO"),
        ({"sync_batchnorm": "yes"}, "sync_batchnorm='yes' is not allowed; expected True or False"),
        ({"sync_batchnorm": 1}, "sync_batchnorm=1 is not allowed; expected True or False"),
    ],
)
def test_every_argument_of_get_strategy_is_checked_like_its_siblings(
    arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(MisconfigurationError) as error:
        stratlib.get_strategy("ddp", accelerator="cpu", devices=2, **arguments)
    _one_line(error, message)


def test_a_cluster_environment_is_taken_by_name_as_an_accelerator_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in {"SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_LOCALID": "1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SLURM_NODEID", "0")
    strategy: Any = stratlib.get_strategy(
        "ddp", accelerator="cpu", devices=2, cluster_environment="SLURM"
    )
    assert type(strategy.cluster_environment) is stratlib.SLURMEnvironment
    assert strategy.global_rank == 1
