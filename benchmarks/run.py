"""Run the benchmarks and print one table.

    python -m benchmarks [--quick] [--only NAME ...] [--markdown PATH] [--json PATH]

Every figure is a ratio to a baseline measured in the same invocation, back to back, so that
the machine's load moves both sides. ``--quick`` runs every benchmark briefly: a smoke test of
the harness whose numbers are too short to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # `python benchmarks/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    __package__ = "benchmarks"


from benchmarks import (
    bench_checkpoint,
    bench_ddp,
    bench_generate,
    bench_import,
    bench_parallel,
    bench_sharded_checkpoint,
)
from benchmarks.common import (
    ROOT,
    BenchmarkError,
    Row,
    Section,
    Settings,
    compile_bytecode,
    run_command,
    worker_env,
)

BENCHMARKS: dict[str, Callable[[Settings], Section]] = {
    "runtime": bench_ddp.step_time,
    "parallel": bench_parallel.step_time,
    "launch": bench_ddp.launch_latency,
    "import": bench_import.import_cost,
    "generate": bench_generate.generation,
    "checkpoint": bench_checkpoint.checkpoints,
    "sharded-checkpoint": bench_sharded_checkpoint.sharded_checkpoints,
}
COLUMNS = ("benchmark", "measured", "baseline", "ratio [min-max]", "target", "met?", "notes")


def machine() -> dict[str, str]:
    """What the figures were measured on."""
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    probe = (
        "import json, torch, importlib.util as u\n"
        "l = None\n"
        "if u.find_spec('lightning'):\n"
        "    from importlib.metadata import version; l = version('lightning')\n"
        "print(json.dumps([torch.__version__, torch.get_num_threads(), l]))\n"
    )
    completed = run_command([sys.executable, "-c", probe], env=worker_env())
    torch_version, threads, lightning = (
        json.loads(completed.stdout) if completed.returncode == 0 else ("not importable", 0, None)
    )
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        memory_text = f"{memory:.0f} GiB"
    except (ValueError, OSError, AttributeError):
        memory_text = "unknown"
    return {
        "cpu": model,
        "cores": f"{os.cpu_count()} ({usable} usable); torch uses {threads} intra-op threads by default",
        "memory": memory_text,
        # The version, not the interpreter's path: a report is published, and the path names
        # the machine's folders, not anything the figures depend on.
        "python": platform.python_version(),
        "torch": str(torch_version),
        "lightning": str(lightning) if lightning else "not installed",
        "os": platform.platform(),
        "load average": _load(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": _commit(),
    }


def _load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def _commit() -> str:
    completed = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return completed.stdout.strip() or "unknown"


def _cells(row: Row) -> list[str]:
    return [
        row.name,
        row.measured,
        row.baseline,
        row.ratio_text,
        row.target,
        row.met_text,
        row.notes,
    ]


def text_table(rows: Sequence[Row]) -> str:
    lines = [list(COLUMNS), *(_cells(r) for r in rows)]
    # The notes column is last and left unpadded so that long notes do not widen the rest.
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS) - 1)]
    out = []
    for index, line in enumerate(lines):
        out.append(
            "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=False))
            + "  "
            + line[-1]
        )
        if index == 0:
            out.append("  ".join("-" * w for w in widths) + "  " + "-" * len(COLUMNS[-1]))
    return "\n".join(line.rstrip() for line in out)


def markdown(rows: Sequence[Row], details: Sequence[str], host: dict[str, str], quick: bool) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join(["---"] * len(COLUMNS)) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(cell(c) for c in _cells(row)) + " |")
    lines.append("")
    if quick:
        lines += ["_Quick smoke run (`--quick`): too short to quote._", ""]
    lines.append("Machine: " + "; ".join(f"{k}: {v}" for k, v in host.items()) + ".")
    lines.append("")
    for detail in details:
        lines.append(f"- {detail}")
    return "\n".join(lines) + "\n"


def failed_row(name: str, error: BaseException) -> Row:
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return Row(
        name=f"{name}: FAILED",
        measured="-",
        baseline="-",
        ratio=None,
        target="-",
        met=False,
        notes=first,
    )


def _terminate(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _run_selected(
    selected: Sequence[str], settings: Settings, rows: list[Row], details: list[str]
) -> int:
    """Run the ``selected`` benchmarks in their order, adding their rows and details; returns
    how many failed (each leaves a FAILED row)."""
    failures = 0
    for name in BENCHMARKS:
        if name not in selected:
            continue
        started = time.perf_counter()
        print(f"running {name} ...", file=sys.stderr, flush=True)
        try:
            section = BENCHMARKS[name](settings)
        except (BenchmarkError, OSError, subprocess.SubprocessError) as exc:
            failures += 1
            print(f"{name} failed: {exc}", file=sys.stderr, flush=True)
            rows.append(failed_row(name, exc))
            continue
        rows.extend(section.rows)
        details.extend(section.details)
        # Partial results survive an interrupted run.
        print(text_table(section.rows), file=sys.stderr, flush=True)
        print(
            f"  {name} done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True
        )
    return failures


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmarks of stratgen and the generated package, as ratios to baselines "
        "measured back to back in the same run.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: every row, short measurements"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=list(BENCHMARKS),
        metavar="NAME",
        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}",
    )
    parser.add_argument(
        "--markdown", type=Path, help="also write the table as Markdown to this file"
    )
    parser.add_argument("--json", type=Path, help="also write every row as JSON to this file")
    args = parser.parse_args(argv)

    # Turn SIGTERM into an exception, so that the worker running at the time and its training
    # ranks are stopped with the harness.
    signal.signal(signal.SIGTERM, _terminate)
    settings = Settings(quick=args.quick)
    selected = args.only or list(BENCHMARKS)
    host = machine()
    host["bytecode"] = compile_bytecode()
    print("Machine: " + "; ".join(f"{k}: {v}" for k, v in host.items()), flush=True)
    rows: list[Row] = []
    details: list[str] = []
    failures = _run_selected(selected, settings, rows, details)
    host["load average"] += f" at start; {_load()} at end"

    print()
    print(text_table(rows))
    print()
    for detail in details:
        print(f"- {detail}")
    if args.quick:
        print("\nQuick smoke run: the figures are too short to quote.")
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(markdown(rows, details, host, args.quick), encoding="utf-8")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"machine": host, "quick": args.quick, "rows": [asdict(r) for r in rows]}, indent=2
            ),
            encoding="utf-8",
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
