"""Commands started from a preload server run as they would in a fresh interpreter.

The server here preloads ``decimal`` (a module no command below imports by itself), so that
each test can tell a forked command from a fresh one, and numpy, whose global random generator
must differ between forks; the suite pays no torch import for these tests.
"""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from stratcore import preload, watch

PRELOAD = ("decimal", "numpy")

REPORT = """\
import json, os, random, sys
preloaded = "decimal" in sys.modules
import numpy
import __main__
report = {
    "preloaded": preloaded,
    "argv": sys.argv,
    "path0": sys.path[0],
    "cwd": os.getcwd(),
    "variable": os.environ.get("PRELOAD_TEST"),
    "stdin": sys.stdin.read(),
    "name": __name__,
    "main_file": getattr(__main__, "__file__", None),
    "random": [random.random(), float(numpy.random.random())],
    "parent": os.getppid(),
}
print(json.dumps(report))
"""


@pytest.fixture
def preloader() -> Iterator[preload.Preloader]:
    # This module's preloader replaces the session's (the root conftest's) while a test runs.
    preloader = preload.Preloader(volatile=("PRELOAD_VOLATILE",))
    session = watch.use_preloader(preloader)
    yield preloader
    watch.use_preloader(session)
    preloader.close()


def _script(folder: Path, source: str, name: str = "script.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return path


def _env(**extra: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", **extra}


def _report(done: Any) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_forked_script_gets_its_arguments_folder_environment_and_input(
    preloader: preload.Preloader, tmp_path: Path
) -> None:
    (tmp_path / "scripts").mkdir()
    script = _script(tmp_path / "scripts", REPORT)
    work = tmp_path / "work"
    work.mkdir()
    done = watch.run(
        [sys.executable, str(script), "a", "--b"],
        env=_env(PRELOAD_TEST="x"),
        cwd=work,
        input="fed",
        preload=PRELOAD,
    )
    report = _report(done)
    assert report["preloaded"], "the command did not start from the preload server"
    assert report["argv"] == [str(script), "a", "--b"]
    assert report["path0"] == str(script.parent.resolve())
    assert report["cwd"] == str(work)
    assert report["variable"] == "x"
    assert report["stdin"] == "fed"
    assert report["name"] == "__main__" and report["main_file"] == str(script)
    assert preloader.forked == 1 and preloader.started == 1


def test_a_forked_module_runs_as_python_m_runs_it(
    preloader: preload.Preloader, tmp_path: Path
) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    _script(package, REPORT, "__main__.py")
    done = watch.run(
        [sys.executable, "-m", "pkg", "one"], env=_env(), cwd=tmp_path, preload=PRELOAD
    )
    report = _report(done)
    assert report["preloaded"]
    assert report["argv"] == [str(package / "__main__.py"), "one"]
    assert report["path0"] == str(tmp_path)
    assert report["main_file"] == str(package / "__main__.py")


def test_a_fresh_interpreter_and_a_fork_end_with_the_same_status_and_output(
    preloader: preload.Preloader, tmp_path: Path
) -> None:
    """Exit codes, an uncaught exception's traceback (the script's frames only), a signal."""
    sources = {
        "exits": "import sys; print('out'); sys.exit(3)",
        "raises": "def f():\n    raise ValueError('boom')\nf()",
        "interrupted": "raise KeyboardInterrupt",
        "killed": "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
        "atexit": "import atexit; atexit.register(print, 'at exit')",
    }
    for name, source in sources.items():
        script = _script(tmp_path, source, f"{name}.py")
        fresh = watch.run([sys.executable, str(script)], env=_env())
        forked = watch.run([sys.executable, str(script)], env=_env(), preload=PRELOAD)
        assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout), name
        assert forked.stderr == fresh.stderr, name
    assert preloader.forked == len(sources)
    killed = watch.run([sys.executable, str(tmp_path / "killed.py")], env=_env(), preload=PRELOAD)
    assert killed.returncode == -signal.SIGTERM


def test_forks_draw_other_random_numbers_and_environments_get_servers_of_their_own(
    preloader: preload.Preloader, tmp_path: Path
) -> None:
    script = _script(tmp_path, REPORT)
    command = [sys.executable, str(script)]
    first = _report(watch.run(command, env=_env(PRELOAD_VOLATILE="1"), preload=PRELOAD))
    second = _report(watch.run(command, env=_env(PRELOAD_VOLATILE="2"), preload=PRELOAD))
    for first_number, second_number in zip(first["random"], second["random"], strict=True):
        assert first_number != second_number, "the forks share the server's random state"
    assert first["parent"] == second["parent"], "a volatile variable started another server"
    assert preloader.started == 1
    other = _report(watch.run(command, env=_env(PRELOAD_TEST="y"), preload=PRELOAD))
    assert other["variable"] == "y" and other["parent"] != first["parent"]
    assert preloader.started == 2


def test_commands_it_cannot_run_as_python_would_start_as_usual(
    preloader: preload.Preloader, tmp_path: Path
) -> None:
    script = _script(tmp_path, REPORT)
    for command in (
        [sys.executable, "-c", REPORT],  # no file to run again
        [sys.executable, "-X", "utf8", str(script)],  # interpreter options
        ["/bin/sh", "-c", f"{sys.executable} {script}"],  # not this interpreter
    ):
        report = _report(watch.run(command, env=_env(), preload=PRELOAD))
        assert not report["preloaded"], command
    assert preloader.forked == 0 and preloader.started == 0


def test_a_stalled_forked_command_is_stopped_and_its_stack_shown(
    preloader: preload.Preloader, tmp_path: Path
) -> None:
    script = _script(tmp_path, "import time\nprint('waiting', flush=True)\ntime.sleep(600)")
    job = watch.Job(
        [sys.executable, str(script)], env=_env(), stall=1.0, preload=PRELOAD, what="sleeper"
    )
    pid = job.process.pid
    with pytest.raises(watch.Stalled) as stalled:
        job.finish()
    message = str(stalled.value)
    assert f"pid {pid}" in message and str(script) in message
    assert "line 3 in <module>" in message, "the fault handler's stack is missing"
    assert job.process.poll() is not None


def test_a_forked_script_starts_its_ranks_as_the_same_script(
    preloader: preload.Preloader, tmp_path: Path
) -> None:
    """The popen launcher starts ranks 1..n-1 with the command that started the script."""
    source = "from stratcore.launchers.popen import script_command\nprint(script_command())"
    script = _script(tmp_path, source)
    runtime = str(Path(preload.__file__).resolve().parents[2])
    env = _env(PYTHONPATH=runtime)
    fresh = watch.run([sys.executable, str(script), "x"], env=env)
    forked = watch.run([sys.executable, str(script), "x"], env=env, preload=PRELOAD)
    assert fresh.returncode == forked.returncode == 0, forked.stderr
    assert forked.stdout == fresh.stdout
    assert preloader.forked == 1


RANKS = """\
import json, os, sys
from pathlib import Path
from stratcore import preload

def facts():
    shown = Path(f"/proc/{os.getpid()}/environ").read_bytes().split(b"\\0")
    return {
        "preloaded": "decimal" in sys.modules,
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "parent": os.getppid(),
        "group": os.getpgid(0),
        "role": os.environ.get("ROLE"),
        "shown": sorted(e.decode() for e in shown if e.startswith((b"ROLE=", b"PRELOAD_VOLATILE="))),
    }

if os.environ.get("ROLE") == "rank":
    print(json.dumps(facts()), flush=True)
    sys.exit(3)
server = preload.RankServer.of_this_process()
env = {**os.environ, "ROLE": "rank"}
rank = server.start([sys.executable, sys.argv[0], "again"], env, ["ROLE"])
code = rank.wait()
refused = server.start([sys.executable, sys.argv[0]], {**env, "OTHER": "1"}, ["ROLE"])
report = {**facts(), "server": server.pid, "rank": rank.pid, "code": code}
print(json.dumps({**report, "refused": refused is None}))
"""


def test_a_forked_command_starts_its_ranks_as_forks_of_its_rank_server(
    preloader: preload.Preloader, tmp_path: Path
) -> None:
    """A rank started through the command's rank server runs as a fresh interpreter would run
    the command (arguments, folder, environment, streams, exit status), in the command's
    process group, with the preloaded modules imported; /proc shows the variables of its
    own; a rank whose environment differs in more than the variables named is refused."""
    script = _script(tmp_path, RANKS)
    runtime = str(Path(preload.__file__).resolve().parents[2])
    env = _env(PYTHONPATH=runtime, PRELOAD_VOLATILE="7")
    done = watch.run([sys.executable, str(script)], env=env, cwd=tmp_path, preload=PRELOAD)
    assert done.returncode == 0, done.stderr
    rank, command = (json.loads(line) for line in done.stdout.splitlines()[-2:])
    assert command["preloaded"] and rank["preloaded"]
    assert rank["argv"] == [str(script), "again"] and rank["cwd"] == command["cwd"]
    assert rank["parent"] == command["server"] and rank["group"] == command["group"]
    assert rank["role"] == "rank" and command["code"] == 3
    assert rank["shown"] == ["PRELOAD_VOLATILE=7", "ROLE=rank"]
    assert command["shown"] == ["PRELOAD_VOLATILE=7"]
    assert command["refused"], "a rank in another environment was forked"
    assert preloader.forked == 1


SPAWNS = """\
import json, multiprocessing, os, signal, sys
from stratcore import preload
from stratcore.preload.spawning import spawned_from_rank_server

def child(connection, how):
    import __main__
    facts = {"preloaded": "decimal" in sys.modules, "parent": os.getppid(), "main": __main__.__name__}
    connection.send(facts)
    connection.close()
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.exit(how)

def spawn(how):
    ours, theirs = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(target=child, args=(theirs, how))
    process.start()
    theirs.close()
    facts = ours.recv()
    process.join()
    return {**facts, "code": process.exitcode}

if __name__ == "__main__":
    server = preload.RankServer.of_this_process()
    with spawned_from_rank_server(["SPAWN_VOLATILE"]):
        spawned = [spawn(how) for how in (0, 3, "kill")]
        os.environ["SPAWN_VOLATILE"] = "changed"
        spawned.append(spawn(0))
        os.environ["OTHER"] = "1"
        spawned.append(spawn(0))
    print(json.dumps({"pid": os.getpid(), "server": server and server.pid, "spawned": spawned}))
"""


def test_processes_spawned_in_a_forked_command_start_from_its_rank_server(
    preloader: preload.Preloader, tmp_path: Path
) -> None:
    """multiprocessing's 'spawn' in a forked command (``spawned_from_rank_server``): the
    process runs its target with the arguments' pipes, its exit status (a code, a signal) is
    the process's ``exitcode``, it starts with the preloaded modules where its environment
    differs in no more than the variables named, and fresh, as anywhere else, where it does."""
    script = _script(tmp_path, SPAWNS)
    runtime = str(Path(preload.__file__).resolve().parents[2])
    env = _env(PYTHONPATH=runtime)
    fresh = _report(watch.run([sys.executable, str(script)], env=env, cwd=tmp_path))
    forked = _report(
        watch.run([sys.executable, str(script)], env=env, cwd=tmp_path, preload=PRELOAD)
    )
    assert fresh["server"] is None and forked["server"] is not None
    codes = [0, 3, -signal.SIGKILL, 0, 0]
    for report in (fresh, forked):
        assert [s["code"] for s in report["spawned"]] == codes, report
        assert {s["main"] for s in report["spawned"]} == {"__mp_main__"}
    assert not any(s["preloaded"] for s in fresh["spawned"])
    assert {s["parent"] for s in fresh["spawned"]} == {fresh["pid"]}
    # The first four from the rank server (one after a volatile variable changed), the last
    # spawned anew: another variable changed.
    assert [s["preloaded"] for s in forked["spawned"]] == [True, True, True, True, False]
    parents = [s["parent"] for s in forked["spawned"]]
    assert parents == [forked["server"]] * 4 + [forked["pid"]]
