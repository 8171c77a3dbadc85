"""tests/support/rankfork.py, which starts the suite's ranks as forks, against the oracle it
stands in for: the same command line run by a fresh interpreter. A probe script reports what a
script can see of how it was started; both ways must report the same, end with the same status
and write the same error."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
import rankfork
from stratcore.testing import watch

PROBE = """
import atexit, os, sys, threading, time
print("torch imported", "torch" in sys.modules, file=sys.stderr)
print("name", __name__, "file", __file__, "argv", sys.argv)
print("path0", sys.path[0], "from PYTHONPATH", os.environ.get("EXTRA") in sys.path)
print("env", os.environ.get("PROBE_VALUE"), "cwd", os.getcwd())
with open("/proc/self/environ", "rb") as proc:
    print("initial environment has it", b"PROBE_VALUE=42" in proc.read().split(b"\\0"))
print("stdin", sys.stdin.read().strip())
atexit.register(lambda: print("atexit ran", flush=True))
def late():
    time.sleep(0.2)
    print("thread finished", flush=True)
threading.Thread(target=late).start()
mode = sys.argv[1]
if mode == "raise":
    raise ValueError("probe failed")
if mode == "terminate":
    sys.stdout.flush()
    os.kill(os.getpid(), 15)
    time.sleep(30)
sys.exit(int(mode))
"""


@pytest.fixture
def probe(tmp_path: Path) -> Path:
    script = tmp_path / "scripts" / "probe.py"
    script.parent.mkdir()
    script.write_text(PROBE, encoding="utf-8")
    return script


@pytest.mark.parametrize("mode", ["0", "3", "raise", "terminate"])
def test_a_forked_script_sees_and_ends_as_in_a_fresh_interpreter(
    probe: Path, tmp_path: Path, mode: str
) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(extra), os.environ.get("PYTHONPATH", "")]),
        "EXTRA": str(extra),
        "PROBE_VALUE": "42",
    }
    command = [sys.executable, str(probe), mode]
    runs = {}
    for how, prefix in (("fresh", []), ("forked", [sys.executable, rankfork.__file__])):
        runs[how] = watch.run([*prefix, *command], env=env, cwd=tmp_path, input=f"read by {mode}")
    fresh, forked = runs["fresh"], runs["forked"]
    # The one difference: the fork's server imported torch.
    assert forked.stderr.startswith("torch imported True\n"), "the fork path was not taken"
    assert fresh.stderr.startswith("torch imported False\n"), fresh.stderr
    expected = {"0": 0, "3": 3, "raise": 1, "terminate": -signal.SIGTERM}[mode]
    assert fresh.returncode == forked.returncode == expected, forked.stderr
    assert forked.stdout == fresh.stdout
    assert f"stdin read by {mode}" in fresh.stdout
    assert "initial environment has it True" in fresh.stdout
    if mode != "terminate":
        assert fresh.stdout.endswith("thread finished\natexit ran\n"), fresh.stdout
    fresh_errors, forked_errors = (run.stderr.split("\n", 1)[1] for run in (fresh, forked))
    assert forked_errors == fresh_errors
    if mode == "raise":
        assert fresh_errors.startswith("Traceback (most recent call last):\n  File "), fresh_errors


SPIN = """
import sys, time
print("torch imported", "torch" in sys.modules, flush=True)
end = time.process_time() + 4
while time.process_time() < end:
    pass
"""


def test_a_watched_job_sees_the_cpu_time_of_its_forked_rank(tmp_path: Path) -> None:
    """stratcore.testing.watch counts the CPU time of a job's processes, found by the marker in their
    initial environment, as progress: a forked rank that computes without a word for longer
    than the stall limit is not a hung job."""
    script = tmp_path / "spin.py"
    script.write_text(SPIN, encoding="utf-8")
    done = watch.run([sys.executable, rankfork.__file__, sys.executable, str(script)], stall=2.0)
    assert done.stdout == "torch imported True\n", "the fork path was not taken"
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("folder", ["session", "none"])
def test_commands_it_cannot_fork_run_as_they_are(folder: str) -> None:
    """A command that is not this interpreter running a script or module, or any command
    without a host, runs unchanged: here, in the client's own process."""
    env = dict(os.environ)
    if folder == "none":
        del env[rankfork.FOLDER_ENV]
        command = [sys.executable, "-c", "import os; print(os.getpid())"]
    else:
        command = ["/bin/sh", "-c", "echo $$"]
    client = watch.Job([sys.executable, rankfork.__file__, *command], env=env)
    done = client.finish()
    assert (done.returncode, done.stdout) == (0, f"{client.process.pid}\n"), done.stderr


def test_the_first_process_of_a_lightning_job_forks_from_a_server_that_holds_lightning() -> None:
    """The Lightning runner's program is the command whose server imports Lightning first (a
    module that moved would quietly fork from torch's server and pay Lightning's import)."""
    from stratcore.testing.lightning.runner import PROGRAM

    assert rankfork.LIGHTNING_PROGRAM == PROGRAM
    assert rankfork._preload("module", PROGRAM) == "lightning"
    assert rankfork._preload("module", "stratcore.testing") == "torch"
    assert rankfork._preload("path", "train.py") == "torch"
