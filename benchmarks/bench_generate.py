"""Wall time of the ``stratgen`` CLI, each run a fresh process, with its own split by step.

The project is a temporary folder with a copy of this checkout's ``specs/`` as its own specs
(``builtin-specs = false``) and this checkout's targets, so the output is the built-in specs
rendered into ``generated/``; it is checked to be identical to this checkout's ``generated/``.
A second project, for the stratlib target alone as ``stratgen init`` makes one, adds
``EXTRA_SPECS`` device specs (each a copy of ``specs/hpu.yaml`` under names of their own, with
a single and a parallel strategy, a backend and a cluster environment: about five files each),
generated from nothing and then regenerated after an edit to one of them.

Baseline: ``black --check`` of the same generated tree (line length 100, py311, one worker
like stratgen's in-process formatting), fresh process, with black's own cache in the same
state (empty or warm) as stratgen's. It answers "how does generating or checking compare with
the formatter check every project already runs on these files?"

stratgen keeps two caches, black's layouts of the long statements it generates
(``stratgen.codegen.formatting``) and the compiled templates (``stratgen.codegen.templating``):
their rows compare the same run with the cache and without it
(``benchmarks.workers.stratgen_without``).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from .common import (
    GENERATED,
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
from .generate_workspace import Sample, Workspace, checkout_targets, same_tree, split

#: The built-in specs, generated from nothing (no output, empty cache), and checked.
COLD_TARGET = 1.5
CHECK_TARGET = 0.5
#: The larger project: this many device specs more than the built-in ones (in a quick run,
#: a smoke test of the same plumbing, a few).
EXTRA_SPECS = 100
QUICK_EXTRA_SPECS = 3
MANY_COLD_TARGET = 8.0
MANY_EDIT_TARGET = 2.0
CASES: dict[str, tuple[str | None, str, bool, str | None]] = {
    # name: (stratgen command or None for black, cache state, remove the output first, the
    # cache switched off through benchmarks.workers.stratgen_without)
    "generate-cold": ("generate", "empty", True, None),
    "generate-noop": ("generate", "warm", False, None),
    "check": ("check", "warm", False, None),
    "check-empty": ("check", "empty", False, None),
    "black-empty": (None, "empty", False, None),
    "black-warm": (None, "warm", False, None),
    # The template cache's row: both sides through the same worker, for the same start-up.
    "check:none": ("check", "warm", False, "none"),
    "check:template-cache": ("check", "warm", False, "template-cache"),
}
ROWS = (
    # case, row name, baseline case, target
    ("generate-cold", "stratgen generate, no output, empty cache", "black-empty", COLD_TARGET),
    ("check", "stratgen check, up to date", "black-warm", CHECK_TARGET),
    (
        "check-empty",
        "stratgen check, up to date, empty cache (a fresh machine, as in CI)",
        "black-empty",
        None,
    ),
    ("generate-noop", "stratgen generate, nothing changed", "black-warm", None),
)


#: What the template cache saves: (row name, the run with it, the run without it).
TEMPLATE_CACHE_ROW = (
    "cache: compiled templates (check, up to date)",
    "check:none",
    "check:template-cache",
)


def _run_case(space: Workspace, case: str) -> Sample:
    command, cache_state, remove, without = CASES[case]
    if command is None:
        cache = space.empty_dir() if cache_state == "empty" else space.warm_black
        return space.black_check(cache)
    if remove:
        shutil.rmtree(space.output)
    cache = space.empty_dir() if cache_state == "empty" else space.warm_cache
    return space.stratgen(command, cache, without=without)


MANY_CASES = {
    # name: what is timed
    "many-cold": "stratgen generate, empty cache, no output",
    "many-edit": "stratgen generate after an edit to one spec",
    "many-black-empty": "black --check, empty cache",
    "many-black-warm": "black --check, warm cache",
    # The cache's rows: both sides through the same worker, for the same start-up.
    "edit:none": "the same, one edited",
    "edit:format-cache": "without black's remembered layouts",
    "check:none": "the same, check after an edit",
    "check:format-cache": "without black's remembered layouts",
}
MANY_ROWS = (
    # case, row name, baseline case, target
    (
        "many-cold",
        "stratgen generate, {count} more specs, no output, empty cache",
        "many-black-empty",
        MANY_COLD_TARGET,
    ),
    (
        "many-edit",
        "stratgen generate, {count} more specs, one edited",
        "many-black-warm",
        MANY_EDIT_TARGET,
    ),
)
#: What the cache saves: (row name, the run with it, the run without it).
CACHE_ROWS = (
    ("cache: black's layouts (one of {count} more specs edited)", "edit:none", "edit:format-cache"),
    (
        "cache: black's layouts (check after an edit to one of {count} more specs)",
        "check:none",
        "check:format-cache",
    ),
)


def _run_many(space: Workspace, case: str) -> Sample:
    if case == "many-cold":
        shutil.rmtree(space.output)
        return space.stratgen("generate", space.empty_dir())
    if case == "many-edit":
        space.edit_one_spec()
        return space.stratgen("generate", space.warm_cache)
    if case.startswith("edit:"):
        space.edit_one_spec()
        return space.stratgen("generate", space.warm_cache, without=case.split(":")[1])
    if case.startswith("check:"):
        # An edit not generated yet: check renders every file and finds the edited ones out
        # of date; the layouts it has seen before come from the cache.
        space.edit_one_spec()
        sample = space.stratgen("check", space.warm_cache, expected=1, without=case.split(":")[1])
        space.stratgen("generate", space.warm_cache)
        return sample
    cache = space.empty_dir() if case == "many-black-empty" else space.warm_black
    sample, _ = space.black(space.output, cache)
    return sample


def _row(
    name: str, run: list[Sample], base: list[Sample], base_name: str, target: float | None
) -> Row:
    walls = [s.wall for s in run]
    bases = [s.wall for s in base]
    ratios = [a / b for a, b in zip(walls, bases, strict=True)]
    measured = median(walls)
    return Row(
        name=name,
        measured=seconds(measured),
        baseline=f"{seconds(median(bases))} {base_name}",
        ratio=median(ratios),
        spread=spread(ratios, 2),
        target=f"{at_most(target)} s" if target is not None else "-",
        met=(measured <= target) if target is not None else None,
        notes=split(run) + f"; baseline CPU {median([s.cpu for s in base]) * 1000:.0f} ms",
    )


def many_specs(settings: Settings, section: Section) -> None:
    """Rows for a project with ``EXTRA_SPECS`` device specs more than the built-in ones, and
    what each cache saves there."""
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
        section.rows.append(
            _row(
                name.format(count=count),
                samples[case],
                samples[base_case],
                MANY_CASES[base_case],
                target,
            )
        )
    for name, case, base_case in CACHE_ROWS:
        section.rows.append(
            _row(
                name.format(count=count),
                samples[case],
                samples[base_case],
                MANY_CASES[base_case],
                None,
            )
        )
    section.details.append(
        f"Larger project: the built-in specs and {count} device specs more (copies of "
        f"specs/hpu.yaml under names of their own, each with a cluster environment), {files} "
        f"generated files for the stratlib target alone (a project as `stratgen init` makes it), "
        f"{rounds} round(s). Cold: no output and an empty cache. One edited: "
        "the description of one spec changed (two generated files change), the cache warm from "
        "the previous run. Baseline: `black --check --workers 1 -l 100 -t py311` over the "
        "generated tree, black's cache empty, or warm (then it re-checks what the edit changed)."
    )
    section.details.append(
        "Cache rows: the run with the cache against the same run without it "
        "(`python -m benchmarks.workers.stratgen_without format-cache`, both through that "
        "worker for the same start-up); ratio < 1 is what the cache saves."
    )


def generation(settings: Settings) -> Section:
    rounds = settings.pick(1, 5)
    section = Section("generation")
    with tempfile.TemporaryDirectory(prefix="stratbench-gen-") as folder:
        # The same targets as this checkout (the Lightning plugins too), so that the output
        # can be compared with generated/.
        space = Workspace(Path(folder), targets=checkout_targets())
        # Prime: the tree and both warm caches exist before anything is timed.
        space.stratgen("generate", space.warm_cache)
        identical, how = same_tree(space.output, GENERATED)
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
        base_name = f"black --check, {CASES[base_case][1]} cache"
        section.rows.append(_row(name, samples[case], samples[base_case], base_name, target))
    name, case, base_case = TEMPLATE_CACHE_ROW
    section.rows.append(
        _row(name, samples[case], samples[base_case], "without the compiled templates", None)
    )
    section.details.append(
        f"Generation: wall time of `python -m stratgen ...` in the project's folder, in a fresh "
        f"process, {rounds} round(s), cases in rotating order; the split is the median of what "
        "`--timings` prints (ms), start-up+imports = wall - in-CLI total; CPU = user+system time of the "
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
        "Modules loaded by `stratgen generate` when nothing changed: "
        + _loaded(noop_modules)
        + "; by `stratgen check` on an up-to-date tree: "
        + _loaded(check_modules)
        + " (warm cache: black is not imported)."
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
