"""The projects and runs the generation benchmark times (``bench_generate``).

A ``Workspace`` is a throw-away project: a copy of this checkout's ``specs/`` as its own specs
(``builtin-specs = false``), optionally ``device_spec`` copies of ``specs/hpu.yaml`` more, with
the cache folders its runs use. Each run is a fresh process: ``python -m stratgen``, or with the
cache switched off, ``python -m benchmarks.workers.stratgen_without`` (see there).
"""

from __future__ import annotations

import filecmp
import re
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .common import ROOT, BenchmarkError, Completed, median, run_command, worker_env

TIMINGS = re.compile(
    r"timings: (?P<steps>.*); total (?P<total>\d+) ms "
    r"\(black cache: (?P<hits>\d+) hits, (?P<misses>\d+) misses\)"
)


@dataclass
class Sample:
    wall: float
    cpu: float = 0.0
    steps: dict[str, float] = field(default_factory=dict)
    total: float = 0.0
    hits: int = 0
    misses: int = 0


def parse_timings(stderr: str) -> Sample:
    """The ``--timings`` line: seconds per step, total, black cache hits and misses."""
    match = TIMINGS.search(stderr)
    if match is None:
        raise BenchmarkError(f"no --timings line in the output:\n{stderr[-2000:]}")
    steps = {}
    for part in match["steps"].split(", "):
        name, value, unit = part.rsplit(" ", 2)
        if unit != "ms":
            raise BenchmarkError(f"unexpected unit in --timings: {part!r}")
        steps[name] = float(value) / 1000
    total = float(match["total"]) / 1000
    return Sample(
        0.0, steps=steps, total=total, hits=int(match["hits"]), misses=int(match["misses"])
    )


def device_spec(index: int) -> str:
    """A device spec like ``specs/hpu.yaml`` (an accelerator, a single-device and a parallel
    strategy, a collective backend), every name its own, plus a cluster environment."""
    text = (ROOT / "specs" / "hpu.yaml").read_text(encoding="utf-8")
    name, title = f"dev{index}", f"Dev{index}"
    for old, new in (
        ("hccl", f"ccl{index}"),
        ("HABANA_VISIBLE_MODULES", f"{name.upper()}_VISIBLE_MODULES"),
        ("HPU", title),
        ("hpu", name),
    ):
        text = text.replace(old, new)
    upper = name.upper()
    return text + (
        "\ncluster_environments:\n"
        f"  - name: {name}_cluster\n"
        f"    class_name: {title}ClusterEnvironment\n"
        "    extends: cluster_environment\n"
        f"    description: Processes started by the {title} job launcher.\n"
        f"    detect: {{all_set: [{upper}_RANK, {upper}_WORLD_SIZE]}}\n"
        f"    world_size: {upper}_WORLD_SIZE\n"
        f"    global_rank: {upper}_RANK\n"
        f"    local_rank: {upper}_LOCAL_RANK\n"
        f"    node_rank: {upper}_NODE_RANK\n"
    )


class Workspace:
    """A throw-away project and the cache folders its runs use."""

    def __init__(
        self, folder: Path, extra_specs: int = 0, targets: tuple[str, ...] = ("stratlib",)
    ) -> None:
        self.folder = folder
        self.project = folder / "project"
        # A copy of this checkout's specs as the project's own (and no second, built-in copy
        # of them): the output is then this checkout's generated/, byte for byte.
        shutil.copytree(ROOT / "specs", self.project / "specs")
        for index in range(extra_specs):
            path = self.project / "specs" / f"dev{index}.yaml"
            path.write_text(device_spec(index), encoding="utf-8")
        self.edits = 0
        listed = ", ".join(f'"{name}"' for name in targets)
        config = f"[tool.stratgen]\nbuiltin-specs = false\ntargets = [{listed}]\n"
        if "docs" in targets:
            # The device pages show this checkout's verification record.
            record = checkout_verification()
            if record is not None:
                shutil.copy(ROOT / record, self.project / record)
                config += f'verification = "{record}"\n'
        (self.project / "pyproject.toml").write_text(config, encoding="utf-8")
        self.warm_cache = folder / "stratgen-cache"
        self.warm_black = folder / "black-cache"
        self.baseline_tree = folder / "baseline" / "generated"
        self._fresh = 0

    @property
    def output(self) -> Path:
        return self.project / "generated"

    def empty_dir(self) -> Path:
        self._fresh += 1
        path = self.folder / f"empty-{self._fresh}"
        path.mkdir()
        return path

    def stratgen(
        self,
        command: str,
        cache: Path,
        expected: int = 0,
        without: str | None = None,
    ) -> Sample:
        """Run ``stratgen COMMAND --timings`` in the project's folder, as its user does,
        ``without`` its cache (a name of ``benchmarks.workers.stratgen_without.CACHES``)."""
        arguments = [command, "--no-color", "--timings"]
        if without is None:
            argv = [sys.executable, "-m", "stratgen", *arguments]
        else:
            module = "benchmarks.workers.stratgen_without"
            argv = [sys.executable, "-m", module, without, "--", *arguments]
        env = worker_env({"STRATGEN_CACHE_DIR": str(cache)})
        started = time.perf_counter()
        completed = run_command(argv, env=env, cwd=self.project)
        wall = time.perf_counter() - started
        if completed.returncode != expected:
            raise BenchmarkError(
                f"stratgen {command} exited with {completed.returncode}:\n{completed.stderr[-3000:]}"
            )
        sample = parse_timings(completed.stderr)
        sample.wall, sample.cpu = wall, completed.cpu
        return sample

    def black(
        self, folder: Path, cache: Path, check: bool = True, quiet: bool = True
    ) -> tuple[Sample, Completed]:
        argv = [
            sys.executable,
            "-m",
            "black",
            "--workers",
            "1",
            "--line-length",
            "100",
            "--target-version",
            "py311",
            str(folder),
        ]
        argv[3:3] = (["--check"] if check else []) + (["--quiet"] if quiet else [])
        env = worker_env({"BLACK_CACHE_DIR": str(cache)})
        started = time.perf_counter()
        completed = run_command(argv, env=env, cwd=self.folder)
        wall = time.perf_counter() - started
        if completed.returncode not in (0, 1):
            raise BenchmarkError(f"black failed:\n{completed.stderr[-3000:]}")
        return Sample(wall, completed.cpu), completed

    def prepare_baseline(self) -> str:
        """A black-formatted copy of the output for the baseline to check, and whether black
        finds the output itself formatted."""
        _, verdict = self.black(self.output, self.empty_dir(), quiet=False)
        shutil.copytree(self.output, self.baseline_tree)
        self.black(self.baseline_tree, self.warm_black, check=False)
        _, again = self.black(self.baseline_tree, self.warm_black)
        if again.returncode != 0:
            raise BenchmarkError("black --check fails on a tree black has just formatted")
        if verdict.returncode == 0:
            return "clean"
        names = [
            Path(line.split("would reformat ", 1)[1]).relative_to(self.output).as_posix()
            for line in verdict.stderr.splitlines()
            if line.startswith("would reformat ")
        ]
        return f"NOT clean, black would reformat {len(names)} files: {', '.join(sorted(names))}"

    def edit_one_spec(self) -> None:
        """Change the description of one extra device spec: two generated files change."""
        path = self.project / "specs" / "dev0.yaml"
        text = path.read_text(encoding="utf-8")
        marker = "description: Strategy for training on a single Dev0 device"
        start = text.index(marker)
        end = text.index("\n", start)
        self.edits += 1
        path.write_text(
            text[:start] + f"{marker} (revision {self.edits})." + text[end:], encoding="utf-8"
        )

    def black_check(self, cache: Path) -> Sample:
        sample, completed = self.black(self.baseline_tree, cache)
        if completed.returncode != 0:
            raise BenchmarkError("black --check failed on the formatted copy of the output")
        return sample


def checkout_targets() -> tuple[str, ...]:
    """The ``targets`` of this checkout's configuration, as stratgen reads it."""
    from stratgen.project import load_config

    return load_config(ROOT).targets


def checkout_verification() -> str | None:
    """The verification record of this checkout's configuration, if it names one."""
    from stratgen.project import load_config

    return load_config(ROOT).verification


def same_tree(ours: Path, reference: Path) -> tuple[bool, str]:
    def files(root: Path) -> set[str]:
        skip = {"__pycache__", ".pytest_cache"}
        return {
            p.relative_to(root).as_posix()
            for p in root.rglob("*")
            if p.is_file()
            and not skip.intersection(p.relative_to(root).parts)
            and not p.name.endswith(".lock")
        }

    # generated/pyproject.toml is the stratlib distribution's metadata, written by hand.
    a, b = files(ours), files(reference) - {"pyproject.toml"}
    if a != b:
        return False, f"{len(a ^ b)} files only on one side"
    differing = [p for p in sorted(a) if not filecmp.cmp(ours / p, reference / p, shallow=False)]
    if differing:
        return False, f"{len(differing)} files differ, e.g. {differing[0]}"
    return True, f"{len(a)} files"


def split(samples: list[Sample]) -> str:
    names: list[str] = []
    for sample in samples:
        names += [n for n in sample.steps if n not in names]
    parts = [f"{n} {median([s.steps.get(n, 0.0) for s in samples]) * 1000:.0f}" for n in names]
    total = median([s.total for s in samples])
    startup = median([s.wall - s.total for s in samples])
    hits, misses = samples[0].hits, samples[0].misses
    cpu = median([s.cpu for s in samples])
    return (
        f"{' / '.join(parts)} ms; start-up+imports {startup * 1000:.0f} ms; in-CLI "
        f"{total * 1000:.0f} ms; CPU {cpu * 1000:.0f} ms; black cache {hits} hits {misses} misses"
    )
