"""What every benchmark shares: settings, result rows, statistics and subprocesses.

The harness itself never imports torch: each measurement runs in a fresh subprocess (a worker
under ``benchmarks/workers/``) that prints one JSON object, so the state of this process (warm
imports, allocator, threads) cannot leak into a measurement.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stratcore.testing.watch import Job, Stalled

ROOT = Path(__file__).resolve().parent.parent
#: Where the generated package and the generator live in a source checkout.
GENERATED = ROOT / "generated"
GENERATOR = ROOT / "generator"


@dataclass(frozen=True)
class Settings:
    """How long to measure. ``quick`` is a smoke run: every row, numbers too short to trust."""

    quick: bool = False

    def pick(self, quick: Any, full: Any) -> Any:
        return quick if self.quick else full


@dataclass
class Row:
    """One line of the result table.

    ``ratio`` is ``measured / baseline`` of the benchmark's own quantity (a time or a
    throughput); ``met`` is None where the benchmark has no target.
    """

    name: str
    measured: str
    baseline: str
    ratio: float | None
    target: str
    met: bool | None
    spread: str = ""
    notes: str = ""

    @property
    def ratio_text(self) -> str:
        if self.ratio is None:
            return "-"
        text = f"{self.ratio:.3f}"
        return f"{text} {self.spread}" if self.spread else text

    @property
    def met_text(self) -> str:
        return {True: "yes", False: "NO", None: "-"}[self.met]


@dataclass
class Section:
    """The rows of one benchmark, with lines explaining what was measured."""

    name: str
    rows: list[Row] = field(default_factory=list)
    details: list[str] = field(default_factory=list)


class BenchmarkError(RuntimeError):
    """A worker failed; the message carries its output."""


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float], digits: int = 3) -> str:
    """``[min-max]`` of a list of ratios, the spread shown next to the median."""
    return f"[{min(values):.{digits}f}-{max(values):.{digits}f}]"


def rotate(items: Sequence[Any], round_index: int) -> list[Any]:
    """``items`` started at a different place every round, so that no variant always runs
    first (on a fresh page cache, after a quiet spell) or last."""
    if not items:
        return []
    shift = round_index % len(items)
    return [*items[shift:], *items[:shift]]


def at_most(target: float) -> str:
    return f"<= {target:g}"


def seconds(value: float) -> str:
    """A duration in the unit that keeps three significant digits readable."""
    if value >= 1.0:
        return f"{value:.2f} s"
    return f"{value * 1000:.1f} ms"


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for subprocesses: this checkout's generated package, generator and
    benchmarks first on the path, no colour, and bytecode caching on, as for an installed
    package (see ``compile_bytecode``)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    paths = [str(ROOT), str(GENERATED), str(GENERATOR)]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["NO_COLOR"] = "1"
    # Torch elastic and cluster variables of an outer job would change how ranks start.
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK"):
        env.pop(name, None)
    if extra:
        env.update(extra)
    return env


def compile_bytecode() -> str:
    """Compile the checkout's packages to bytecode before anything is timed.

    Installed packages ship compiled (pip compiles on install); a checkout run with
    PYTHONDONTWRITEBYTECODE would otherwise recompile stratlib and stratgen from source in
    every fresh process, while torch, jinja2 and black load from bytecode. Returns a line for
    the machine description.
    """
    folders = [str(GENERATED / "stratlib"), str(GENERATOR / "stratgen"), str(ROOT / "benchmarks")]
    completed = run_command([sys.executable, "-m", "compileall", "-q", *folders], env=worker_env())
    if completed.returncode != 0:
        raise BenchmarkError(
            f"compileall failed:\n{completed.stdout[-2000:]}{completed.stderr[-2000:]}"
        )
    inherited = "set" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "not set"
    return f"compiled beforehand for every worker (PYTHONDONTWRITEBYTECODE {inherited} here, unset for workers)"


def run_worker(
    module: str, args: Sequence[str], env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run ``python -m module args`` and return the JSON object it writes to ``--out``."""
    with tempfile.TemporaryDirectory(prefix="stratbench-") as folder:
        out = Path(folder) / "result.json"
        command = [sys.executable, "-m", module, "--out", str(out), *args]
        # CLOCK_MONOTONIC is one clock for every process of the machine: workers report
        # time.monotonic() readings that are compared with this one.
        started = time.monotonic()
        completed = run_command(command, env=worker_env(env))
        if completed.returncode != 0 or not out.is_file():
            raise BenchmarkError(
                f"{' '.join(command[1:])} exited with {completed.returncode}:\n"
                f"{_tail(completed.stdout)}\n{_tail(completed.stderr)}"
            )
        result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        result["started_at"] = started
        return result


@dataclass
class Completed:
    """A finished command: exit code, output, and the CPU time it and its children used."""

    returncode: int
    stdout: str
    stderr: str
    cpu: float


def run_command(command: Sequence[str], env: dict[str, str], cwd: Path = ROOT) -> Completed:
    """Run ``command`` to its end. It fails (BenchmarkError) only when it stops making
    progress: no output and no CPU time used by it or any process it started for
    ``watch.STALL`` seconds (see ``stratcore.testing.watch``), which on a busy machine tells a hang
    from slowness; the error then says where each of its processes was. Every process it
    started is stopped with it, training ranks included, and none is waited for after it
    ended (a rank that outlives its launcher cannot hold the harness).

    Commands run one at a time, so the growth of this process's children CPU time while one
    runs is that command's own (user + system), which the machine's load barely changes.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    what = " ".join(Path(part).name if index == 0 else part for index, part in enumerate(command))
    job = Job(command, what=what[:200], env=env, cwd=cwd, start_new_session=True)
    try:
        finished = job.finish()
    except Stalled as exc:
        raise BenchmarkError(str(exc)) from None
    except BaseException:
        job.kill()
        raise
    finally:
        job.kill()  # what the command left running
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Completed(finished.returncode, finished.stdout, finished.stderr, cpu)


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.splitlines()[-lines:])
