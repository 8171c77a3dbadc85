"""Run the checks of ``benchmarks.gpu.plan`` and write the report.

    python -m benchmarks.gpu [--device auto|cuda|accelerator|cpu] [--size full|small]
                             [--out DIR] [--commit SHA] [--budget SECONDS] [--only TEXT ...]
                             [--wheels DIR] [--list]

Each check runs in a fresh process (``benchmarks/gpu/workers``), watched for progress
(``stratcore.testing.watch``): one that fails, hangs or crashes fails its own row and the next check
runs. On a GPU the checks share a time budget (``plan.GPU_BUDGET``): a check starts only while
the budget has its expected seconds left, and is stopped at three times them. On another
device that ``torch.accelerator`` reports (``--device accelerator``) the same checks run through
the generic spec's strategies and plugins; without either, on the CPU, small. Off CUDA there
is no budget unless one is given. The exit code is 1 if a check failed, 2 for a mistake on the
command line, else 0.

The harness imports no torch: it runs with the checkout's folders on ``PYTHONPATH`` and
whatever Python and torch the machine has.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: The checkout's packages, as the workers import them (no installation needed).
SOURCE_PATHS = (ROOT, ROOT / "runtime", ROOT / "generated", ROOT / "generator")
# The harness needs the runtime's process watching, from the checkout where nothing is
# installed (a bare GPU machine).
sys.path[1:1] = [str(p) for p in SOURCE_PATHS if str(p) not in sys.path]

from stratcore.testing import watch  # noqa: E402

from benchmarks.gpu import plan, report  # noqa: E402
from benchmarks.gpu.report import Outcome  # noqa: E402

#: Wheels carried to a machine that lacks a package (``benchmarks/gpu_wheels.sh`` builds them).
WHEELS = ROOT / ".whl"
WHEEL_TARGET = Path(tempfile.gettempdir()) / "stratgen-gpu-site"
#: The kinds of device, as ``--device`` names them (``workers.support.DEVICES``).
DEVICES = ("cuda", "accelerator", "cpu")
#: A check's outcomes, as the verdict counts them.
STATUSES = {"pass": "passed", "fail": "failed", "skip": "skipped", "left out": "left out"}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu",
        description="Train with stratlib's strategies and plugins on a GPU (or, without one, "
        "the device torch.accelerator reports, else the CPU), compare each with a hand-written "
        "loop, and write a report.",
    )
    parser.add_argument(
        "--device",
        choices=("auto", *DEVICES),
        default="auto",
        help="cuda: torch.cuda's GPU; accelerator: the device torch.accelerator reports, "
        "through the generic spec; auto (the default): cuda, else accelerator, else cpu",
    )
    parser.add_argument(
        "--size",
        choices=("full", "small"),
        help="the model and the runs: full (sized for an H100; the default on a device) or "
        "small (the default on the CPU)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("gpu-check"), help="report folder (default: gpu-check)"
    )
    parser.add_argument("--commit", help="the commit of the checked tree (default: from git)")
    parser.add_argument(
        "--budget",
        type=float,
        help=f"seconds for all checks (default: {plan.GPU_BUDGET:g} on a GPU, none on the CPU)",
    )
    parser.add_argument(
        "--only", action="append", metavar="TEXT", help="run the checks whose name contains TEXT"
    )
    parser.add_argument(
        "--wheels", type=Path, default=WHEELS, help="wheels to install first (default: .whl)"
    )
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    args = parser.parse_args(argv)
    if args.budget is not None and args.budget <= 0:
        parser.error(f"--budget must be a positive number of seconds, not {args.budget:g}")
    return args


def worker_env(site: Path | None = None) -> dict[str, str]:
    """The workers' environment: the checkout's packages first on the path, then ``site``
    (carried wheels, for the checks that need them), no rank variables of an outer job,
    output unbuffered, bytecode cached."""
    env = dict(os.environ)
    paths = [str(p) for p in SOURCE_PATHS]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    if site is not None:
        paths.append(str(site))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    # Bytecode cached, as for installed packages: each worker would otherwise compile torch's
    # dynamo and sympy from source again (seconds of CPU in every process).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["NO_COLOR"] = "1"
    for name in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NODE_RANK"):
        env.pop(name, None)
    return env


def install_wheels(folder: Path) -> tuple[str, Path | None]:
    """Install carried wheels into a folder of their own, where DeepSpeed is missing here;
    returns what was done, and the folder for the path."""
    wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if not wheels:
        return f"none carried ({folder} holds no wheels)", None
    if importlib.util.find_spec("deepspeed") is not None:
        return (
            f"not installed: DeepSpeed is installed here ({len(wheels)} wheels in {folder})",
            None,
        )
    command = [
        sys.executable,
        *("-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"),
        *("--no-cache-dir", "--upgrade", "--target", str(WHEEL_TARGET), *map(str, wheels)),
    ]
    completed = watch.run(command, what="pip install the carried wheels", cwd=ROOT)
    if completed.returncode != 0:
        tail = (completed.stdout + completed.stderr).strip().splitlines()[-3:]
        return f"installing {len(wheels)} wheels failed: {' '.join(tail)}", None
    names = ", ".join(w.name.split("-")[0] + " " + w.name.split("-")[1] for w in wheels)
    return f"installed into {WHEEL_TARGET}: {names}", WHEEL_TARGET


def probe(env: dict[str, str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="stratgen-gpu-") as folder:
        out = Path(folder) / "facts.json"
        command = [sys.executable, "-m", "benchmarks.gpu.workers.probe", "--out", str(out)]
        completed = watch.run(command, what="probe", env=env, cwd=ROOT)
        if completed.returncode != 0 or not out.is_file():
            raise SystemExit(
                f"the probe of torch and the device failed:\n{completed.stderr[-3000:]}"
            )
        facts: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        return facts


def choose_device(wanted: str, facts: dict[str, Any]) -> str:
    """The kind of device ``--device wanted`` means here (``facts``: the probe's): ``auto`` is
    CUDA where torch sees a GPU, else the device ``torch.accelerator`` reports, else the CPU.
    ValueError where the device asked for is not here."""
    found = facts["devices"]
    if wanted == "auto":
        return "cuda" if "cuda" in found else "accelerator" if "accelerator" in found else "cpu"
    if wanted not in found:
        what = {"cuda": "no CUDA device", "accelerator": "no device in torch.accelerator"}
        raise ValueError(f"--device {wanted}, but torch sees {what[wanted]} here")
    return wanted


def default_size(device: str) -> str:
    return "small" if device == "cpu" else "full"


def skip_reason(check: plan.Check, device: str, facts: dict[str, Any]) -> str | None:
    for need in check.needs:
        if need == "accelerator" and device == "cpu":
            return plan.NEEDS[need]
        if need in ("lightning", "deepspeed") and facts["packages"].get(need) is None:
            return plan.NEEDS[need]
    return None


def run_check(
    check: plan.Check,
    device: str,
    env: dict[str, str],
    limit: float | None,
    size: str | None = None,
) -> Outcome:
    outcome = Outcome(check.name, "fail", "", check.covers, expected_seconds=check.gpu_seconds)
    with tempfile.TemporaryDirectory(prefix="stratgen-gpu-") as folder:
        out = Path(folder) / "result.json"
        module = f"benchmarks.gpu.workers.{check.worker}"
        command = [sys.executable, "-m", module, "--device", device]
        command += ["--size", size or default_size(device), "--out", str(out), *check.args]
        started = time.monotonic()
        job = watch.Job(
            command,
            what=check.name,
            env=env,
            cwd=ROOT,
            limit=limit if limit is not None else watch.LIMIT,
            start_new_session=True,
        )
        try:
            completed = job.finish()
        except watch.Stalled as exc:
            text = str(exc)
            outcome.figure = text.splitlines()[0][:300]
            outcome.error = text[-6000:]
            return outcome
        finally:
            job.kill()
            outcome.seconds = time.monotonic() - started
        if not out.is_file():
            outcome.figure = f"the worker exited with {completed.returncode} and wrote no result"
            outcome.error = (completed.stdout[-2000:] + completed.stderr[-6000:]).strip()
            return outcome
        found = json.loads(out.read_text(encoding="utf-8"))
    outcome.status = found["status"]
    outcome.figure = found["figure"]
    outcome.conditions = found["conditions"]
    outcome.details = found["details"]
    outcome.error = found.get("traceback", "")
    return outcome


def run_checks(
    checks: Sequence[plan.Check],
    device: str,
    facts: dict[str, Any],
    envs: tuple[dict[str, str], dict[str, str]],
    budget: float | None,
    done: Callable[[list[Outcome]], object] = lambda outcomes: None,
    size: str | None = None,
) -> list[Outcome]:
    """Run ``checks`` in turn; ``envs``: the environment of a check, and of a check that
    needs carried packages. ``done`` is called with the outcomes so far after each check;
    ``size``: the model's (by default the device's, ``default_size``)."""
    outcomes: list[Outcome] = []
    started = time.monotonic()
    for check in checks:
        reason = skip_reason(check, device, facts)
        limit = None
        if reason is None and budget is not None:
            left = budget - (time.monotonic() - started)
            if left < check.gpu_seconds:
                outcome = Outcome(
                    check.name,
                    "left out",
                    f"the budget of {budget:g} s had {max(left, 0):.0f} s left; this check "
                    f"expects {check.gpu_seconds:g} s",
                    check.covers,
                    expected_seconds=check.gpu_seconds,
                )
                outcomes.append(outcome)
                _print(outcome)
                done(outcomes)
                continue
            limit = min(left, check.gpu_seconds * plan.LIMIT_FACTOR)
        if reason is not None:
            outcome = Outcome(check.name, "skip", reason, check.covers)
        else:
            env = envs[1] if "deepspeed" in check.needs else envs[0]
            outcome = run_check(check, device, env, limit, size)
        outcomes.append(outcome)
        _print(outcome)
        done(outcomes)
    return outcomes


def _print(outcome: Outcome) -> None:
    seconds = "" if outcome.seconds is None else f" ({outcome.seconds:.1f} s)"
    print(f"{outcome.name}: {outcome.status}{seconds}: {outcome.figure}", flush=True)


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    checks = [c for c in plan.CHECKS if not args.only or any(t in c.name for t in args.only)]
    if args.list:
        for c in plan.CHECKS:
            print(f"{c.name:28} {c.gpu_seconds:>4g} s  {c.covers}")
        print(f"expected on one H100: {plan.gpu_seconds():g} s; budget {plan.GPU_BUDGET:g} s")
        return 0
    if not checks:
        print(f"error: no check's name contains {' or '.join(args.only)}", file=sys.stderr)
        return 2
    # A SIGTERM stops the check running then, and its processes, with the harness.
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _check(args, checks)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _check(args: argparse.Namespace, checks: Sequence[plan.Check]) -> int:
    started = time.monotonic()
    wheels, site = install_wheels(args.wheels)
    env = worker_env()
    # The carried packages (pydantic, typing-extensions, ...) are on the path of the checks
    # that need them only: the others run on the machine's packages as they are.
    carried_env = worker_env(site)
    facts = probe(carried_env)
    try:
        device = choose_device(args.device, facts)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    size = args.size or default_size(device)
    budget = args.budget
    if device == "cuda" and budget is None:
        budget = plan.GPU_BUDGET
    if size == "small":
        # One thread a process, as the test suite runs them: small steps on a busy machine
        # are many times slower with threads spinning against other processes.
        for environ in (env, carried_env):
            environ.setdefault("OMP_NUM_THREADS", "1")
    checked = facts["devices"][device]
    print(f"checking on {checked['description']} with torch {facts['torch']}", flush=True)
    machine = {
        "device": checked["description"],
        "device name": checked["name"],
        "checked on": device,
        **({"size": size} if size != default_size(device) else {}),
        **({"collective backend": checked["backend"]} if device == "accelerator" else {}),
        "torch": facts["torch"],
        "CUDA": facts["cuda"],
        "cuDNN": facts["cudnn"],
        "NCCL": facts["nccl"],
        "python": facts["python"],
        **{name: version or "not installed" for name, version in facts["packages"].items()},
        "carried wheels": wheels,
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": report.commit(ROOT, args.commit),
    }

    def write(outcomes: list[Outcome], final: bool = False) -> dict[str, Any]:
        """The report so far: written after every check, so that a run stopped from outside
        leaves what it found."""
        elapsed = time.monotonic() - started
        counts = {s: sum(o.status == s for o in outcomes) for s in STATUSES}
        verdict = ", ".join(f"{n} {STATUSES[s]}" for s, n in counts.items())
        verdict += f", in {elapsed:.0f} s" + (f" (budget: {budget:g} s)" if budget else "")
        if not final:
            verdict = f"Stopped early: {len(outcomes)} of {len(checks)} checks done: {verdict}"
        summary = {"verdict": verdict, "counts": counts, "seconds": elapsed, "budget": budget}
        report.write(args.out, outcomes, machine, summary)
        return summary

    outcomes = run_checks(checks, device, facts, (env, carried_env), budget, write, size)
    summary = write(outcomes, final=True)
    print(f"{summary['verdict']}\nreport: {args.out / report.MARKDOWN}, {report.JSON}", flush=True)
    return 1 if summary["counts"]["fail"] else 0
