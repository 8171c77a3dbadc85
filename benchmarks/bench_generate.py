"""Wall time of the ``stratgen`` CLI, each run a fresh process, with its own split by step.

The project is a temporary folder with a copy of this checkout's ``specs/`` as its own specs
(``builtin-specs = false``) and this checkout's targets, so the output is the built-in specs
rendered into ``generated/``; it is checked to be identical to this checkout's ``generated/``.
A second project, for the stratlib target alone as ``stratgen init`` makes one, adds
``EXTRA_SPECS`` device specs (each a copy of ``specs/hpu.yaml`` under names of its own, with a
single and a parallel strategy, a backend and a cluster environment: about five files each),
generated cold and then regenerated after an edit to one of them.

Baseline: ``black --check`` of the same generated tree (line length 100, py311, one worker
like stratgen's in-process formatting), fresh process, with black's own cache in the same
state (empty or warm) as stratgen's. It answers "how does generating or checking compare with
the formatter check every project already runs on these files?"
"""

from __future__ import annotations

import filecmp
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .common import (
    GENERATED,
    ROOT,
    BenchmarkError,
    Completed,
    Row,
    Section,
    Settings,
    at_most,
    median,
    rotate,
    run_command,
    run_worker,
    seconds,
    spread,
    worker_env,
)

COLD_TARGET = 0.8
NOOP_TARGET = 0.3
#: The larger project: this many device specs more than the built-in ones (in a quick run,
#: a smoke test of the same plumbing, a few).
EXTRA_SPECS = 100
QUICK_EXTRA_SPECS = 3
MANY_COLD_TARGET = 3.0
MANY_EDIT_TARGET = 0.3
TIMINGS = re.compile(
    r"timings: (?P<steps>.*); total (?P<total>\d+) ms "
    r"\(black cache: (?P<hits>\d+) hits, (?P<misses>\d+) misses"
    r"(?:; render memo: (?P<memo_hits>\d+) hits, (?P<memo_misses>\d+) misses)?\)"
)


@dataclass
class Sample:
    wall: float
    cpu: float = 0.0
    steps: dict[str, float] = field(default_factory=dict)
    total: float = 0.0
    hits: int = 0
    misses: int = 0
    memo: tuple[int, int] | None = None  # render memo hits and misses, where it was used


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
    memo = None
    if match["memo_hits"] is not None:
        memo = (int(match["memo_hits"]), int(match["memo_misses"]))
    return Sample(
        0.0,
        steps=steps,
        total=total,
        hits=int(match["hits"]),
        misses=int(match["misses"]),
        memo=memo,
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
    """A throw-away project and the caches its runs use."""

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
        (self.project / "pyproject.toml").write_text(
            f"[tool.stratgen]\nbuiltin-specs = false\ntargets = [{listed}]\n", encoding="utf-8"
        )
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

    def stratgen(self, command: str, cache: Path, expected: int = 0) -> Sample:
        argv = [
            sys.executable,
            "-m",
            "stratgen",
            command,
            "--project",
            str(self.project),
            "--timings",
            "--no-color",
        ]
        env = worker_env({"STRATGEN_CACHE_DIR": str(cache)})
        started = time.perf_counter()
        completed = run_command(argv, env=env, cwd=self.folder)
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


def _checkout_targets() -> tuple[str, ...]:
    """The ``targets`` of this checkout's configuration, as stratgen reads it."""
    from stratgen.project import load_config

    return load_config(ROOT).targets


def _same_tree(ours: Path, reference: Path) -> tuple[bool, str]:
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


def _split(samples: list[Sample]) -> str:
    names: list[str] = []
    for sample in samples:
        names += [n for n in sample.steps if n not in names]
    parts = [f"{n} {median([s.steps.get(n, 0.0) for s in samples]) * 1000:.0f}" for n in names]
    total = median([s.total for s in samples])
    startup = median([s.wall - s.total for s in samples])
    hits, misses = samples[0].hits, samples[0].misses
    cpu = median([s.cpu for s in samples])
    memo = samples[0].memo
    remembered = f"; render memo {memo[0]} hits {memo[1]} misses" if memo else ""
    return (
        f"{' / '.join(parts)} ms; start-up+imports {startup * 1000:.0f} ms; in-CLI "
        f"{total * 1000:.0f} ms; CPU {cpu * 1000:.0f} ms; black cache {hits} hits {misses} misses"
        f"{remembered}"
    )


CASES = {
    # name: (stratgen command or None for black, cache state, remove the output first)
    "generate-cold-empty": ("generate", "empty", True),
    "generate-checkout": ("generate", "empty", False),
    "generate-cold-warm": ("generate", "warm", True),
    "generate-noop": ("generate", "warm", False),
    "check": ("check", "warm", False),
    "check-empty": ("check", "empty", False),
    "black-empty": (None, "empty", False),
    "black-warm": (None, "warm", False),
}
ROWS = (
    # case, row name, baseline case, target
    (
        "generate-checkout",
        "stratgen generate, fresh checkout, empty caches",
        "black-empty",
        COLD_TARGET,
    ),
    (
        "generate-cold-empty",
        "stratgen generate, no output, empty caches",
        "black-empty",
        None,
    ),
    ("generate-cold-warm", "stratgen generate, cold, warm cache", "black-warm", COLD_TARGET),
    ("generate-noop", "stratgen generate, no-op", "black-warm", NOOP_TARGET),
    ("check", "stratgen check, up to date", "black-warm", NOOP_TARGET),
    ("check-empty", "stratgen check, empty black cache", "black-empty", None),
)


def _run_case(space: Workspace, case: str) -> Sample:
    command, cache_state, remove = CASES[case]
    if command is None:
        cache = space.empty_dir() if cache_state == "empty" else space.warm_black
        return space.black_check(cache)
    if remove:
        shutil.rmtree(space.output)
    cache = space.empty_dir() if cache_state == "empty" else space.warm_cache
    return space.stratgen(command, cache)


MANY_CASES = {
    # name: what is timed
    "many-checkout": "stratgen generate, output present and up to date, empty caches",
    "many-cold": "stratgen generate, empty cache, no output",
    "many-edit": "stratgen generate after an edit to one spec, warm cache",
    "many-black-empty": "black --check, empty cache",
    "many-black-warm": "black --check, warm cache",
}
MANY_ROWS = (
    # case, row name, baseline case, target
    (
        "many-checkout",
        "stratgen generate, {count} more specs, fresh checkout, empty caches",
        "many-black-empty",
        MANY_COLD_TARGET,
    ),
    (
        "many-cold",
        "stratgen generate, {count} more specs, no output, empty caches",
        "many-black-empty",
        None,
    ),
    (
        "many-edit",
        "stratgen generate, {count} more specs, one edited",
        "many-black-warm",
        MANY_EDIT_TARGET,
    ),
)


def _run_many(space: Workspace, case: str) -> Sample:
    if case == "many-checkout":
        return space.stratgen("generate", space.empty_dir())
    if case == "many-cold":
        shutil.rmtree(space.output)
        return space.stratgen("generate", space.empty_dir())
    if case == "many-edit":
        space.edit_one_spec()
        return space.stratgen("generate", space.warm_cache)
    cache = space.empty_dir() if case == "many-black-empty" else space.warm_black
    sample, _ = space.black(space.output, cache)
    return sample


def many_specs(settings: Settings, section: Section) -> None:
    """Rows for a project with ``EXTRA_SPECS`` device specs more than the built-in ones."""
    rounds = settings.pick(1, 3)
    count = settings.pick(QUICK_EXTRA_SPECS, EXTRA_SPECS)
    with tempfile.TemporaryDirectory(prefix="stratbench-many-") as folder:
        space = Workspace(Path(folder), extra_specs=count)
        samples: dict[str, list[Sample]] = {case: [] for case in MANY_CASES}
        # The first cold run and black's first check fill the warm caches, and are samples of
        # the cold cases (output absent, caches empty) in the first round.
        samples["many-cold"].append(space.stratgen("generate", space.warm_cache))
        samples["many-black-empty"].append(space.black(space.output, space.warm_black)[0])
        files = sum(1 for p in space.output.rglob("*") if p.is_file())
        for index in range(rounds):
            for case in rotate(list(MANY_CASES), index):
                if index == 0 and case in ("many-cold", "many-black-empty"):
                    continue
                samples[case].append(_run_many(space, case))
    for case, name, base_case, target in MANY_ROWS:
        walls = [s.wall for s in samples[case]]
        bases = [s.wall for s in samples[base_case]]
        ratios = [a / b for a, b in zip(walls, bases, strict=True)]
        measured = median(walls)
        section.rows.append(
            Row(
                name=name.format(count=count),
                measured=seconds(measured),
                baseline=f"{seconds(median(bases))} {MANY_CASES[base_case]}",
                ratio=median(ratios),
                spread=spread(ratios, 2),
                target=f"{at_most(target)} s" if target is not None else "-",
                met=(measured <= target) if target is not None else None,
                notes=_split(samples[case])
                + f"; baseline CPU {median([s.cpu for s in samples[base_case]]) * 1000:.0f} ms",
            )
        )
    section.details.append(
        f"Larger project: the built-in specs and {count} device specs more (copies of "
        f"specs/hpu.yaml under names of their own, each with a cluster environment), {files} "
        f"generated files for the stratlib target alone (a project as `stratgen init` makes it), "
        f"{rounds} round(s). Cold: no output and every cache empty. One edited: "
        "the description of one spec changed (two generated files change), caches warm from "
        "the previous run. Baseline: `black --check --workers 1 -l 100 -t py311` over the "
        "generated tree, black's cache empty, or warm (then it re-checks what the edit changed)."
    )


def generation(settings: Settings) -> Section:
    rounds = settings.pick(1, 5)
    section = Section("generation")
    with tempfile.TemporaryDirectory(prefix="stratbench-gen-") as folder:
        # The same targets as this checkout (the Lightning plugins too), so that the output
        # can be compared with generated/.
        space = Workspace(Path(folder), targets=_checkout_targets())
        # Prime: the tree and both warm caches exist before anything is timed.
        space.stratgen("generate", space.warm_cache)
        identical, how = _same_tree(space.output, GENERATED)
        black_state = space.prepare_baseline()
        samples: dict[str, list[Sample]] = {case: [] for case in CASES}
        for index in range(rounds):
            for case in rotate(list(CASES), index):
                samples[case].append(_run_case(space, case))
        noop_modules = run_worker(
            "benchmarks.workers.modules",
            ["cli", "--", "generate", "--project", str(space.project)],
            env={"STRATGEN_CACHE_DIR": str(space.warm_cache)},
        )
        check_modules = run_worker(
            "benchmarks.workers.modules",
            ["cli", "--", "check", "--project", str(space.project)],
            env={"STRATGEN_CACHE_DIR": str(space.warm_cache)},
        )
    startup = python_startup(settings)

    for case, name, base_case, target in ROWS:
        walls = [s.wall for s in samples[case]]
        bases = [s.wall for s in samples[base_case]]
        base_cpu = [s.cpu for s in samples[base_case]]
        ratios = [a / b for a, b in zip(walls, bases, strict=True)]
        measured = median(walls)
        section.rows.append(
            Row(
                name=name,
                measured=seconds(measured),
                baseline=f"{seconds(median(bases))} black --check, {CASES[base_case][1]} cache",
                ratio=median(ratios),
                spread=spread(ratios, 2),
                target=f"{at_most(target)} s" if target is not None else "-",
                met=(measured <= target) if target is not None else None,
                notes=_split(samples[case]) + f"; baseline CPU {median(base_cpu) * 1000:.0f} ms",
            )
        )
    section.details.append(
        f"Generation: wall time of `python -m stratgen ...` in a fresh process, {rounds} "
        "round(s), cases in rotating order; the split is the median of what `--timings` "
        "prints (ms), start-up+imports = wall - in-CLI total; CPU = user+system time of the "
        "process (insensitive to other load on the machine). Targets apply to the wall time; "
        "the ratio is to `black --check --workers 1 -l 100 -t py311` over a black-formatted "
        "copy of the same output tree, black's cache in the same state (empty, or warm). "
        f"Interpreter start-up (`python -c pass`) here: {seconds(startup)}."
    )
    section.details.append(
        "Output of the cold generation identical to this checkout's generated/: "
        f"{'yes' if identical else 'NO'} ({how}). `black --check -l 100` on it: {black_state}."
    )
    section.details.append(
        "Modules loaded by a no-op `stratgen generate`: "
        + _loaded(noop_modules)
        + "; by `stratgen check` on an up-to-date tree: "
        + _loaded(check_modules)
        + " (warm cache)."
    )
    many_specs(settings, section)
    return section


def _loaded(result: dict[str, object]) -> str:
    loaded = result["loaded"]
    assert isinstance(loaded, dict)
    return ", ".join(f"{name} {'yes' if flag else 'no'}" for name, flag in loaded.items())


def python_startup(settings: Settings) -> float:
    walls = []
    for _ in range(settings.pick(1, 10)):
        started = time.perf_counter()
        run_command([sys.executable, "-c", "pass"], env=worker_env())
        walls.append(time.perf_counter() - started)
    return median(walls)
