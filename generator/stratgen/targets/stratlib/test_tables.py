"""The tables of a generated test module: what each entry of a spec file says it does, as rows
of ``stratcore.testing.rows`` (Python literals), and example environments (SLURM, LSF, ...)
under which each cluster environment must be detected."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stratcore.contract import (
    DEFAULT_PRECISION,
    ENVIRONMENT_VALUES,
    EXAMPLE_JOB,
    EXAMPLE_LAYOUT,
    LAYOUT_VALUES,
    PRECISIONS,
    REDUCE_OPS,
    SINGLE_PROCESS_JOB,
    UNEVEN_JOB,
    best_plugin,
)

from ...codegen.python_source import literal, sorted_names
from ...resolve.catalog import Accelerator, Catalog, ClusterEnvironment, PrecisionPlugin, Strategy
from ...resolve.runtime_facts import processes_per_node
from ...spec.model import Condition, ValueSource


@dataclass
class TestTables:
    """What one spec file's generated tests check, as literals for its template: each table a
    list of ``stratcore.testing.rows`` constructor calls."""

    #: (constant name, ``Expectation(...)``) of the module's own strategies, where what they do
    #: on an accelerator differs from what ``spec_facts`` says of it
    expectations: list[tuple[str, str]] = field(default_factory=list)
    #: the constants of ``spec_facts`` the rows refer to
    shared: set[str] = field(default_factory=set)
    strategies: list[str] = field(default_factory=list)
    accelerators: list[str] = field(default_factory=list)
    environments: list[str] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)
    #: abstract bases (strategies, cluster environments, precision plugins), by class name
    abstract: list[str] = field(default_factory=list)
    #: the package's classes the tables name
    classes: set[str] = field(default_factory=set)
    #: the names of ``stratcore.testing`` the tables are written with
    uses: set[str] = field(default_factory=set)

    @property
    def testing_names(self) -> list[str]:
        """What the module imports from ``stratcore.testing``, in isort's order."""
        return sorted_names(self.uses)

    @property
    def suites(self) -> list[str]:
        """The classes of ``stratcore.testing.suite`` the module runs over its tables."""
        tables = [
            ("StrategyTests", self.strategies),
            ("AcceleratorTests", self.accelerators),
            ("EnvironmentTests", self.environments),
            ("PrecisionPluginTests", self.plugins),
            ("AbstractBaseTests", self.abstract),
        ]
        return sorted(name for name, rows in tables if rows)


def _call(function: str, positional: Iterable[str], keywords: Iterable[tuple[str, str]]) -> str:
    arguments = [*positional, *(f"{name}={value}" for name, value in keywords)]
    return f"{function}({', '.join(arguments)})"


def _expectation(catalog: Catalog, strategy: Strategy | None, accelerator_name: str) -> str:
    """What the spec says ``strategy`` does on one accelerator, as a constructor call; with no
    strategy, what a strategy that declares nothing of its own (no precision, backend or
    wrapper) does there."""
    accelerator = catalog.accelerators[accelerator_name]
    on_device = accelerator.spec.precision.supported or PRECISIONS
    if strategy is None:
        plugins = [p for p in catalog.precision_plugins.values() if not p.abstract]
        precisions = tuple(
            mode for mode in on_device if best_plugin(plugins, mode, "none", accelerator_name)
        )
        default = accelerator.spec.precision.default or DEFAULT_PRECISION
        backend = accelerator.backend
    else:
        precisions = tuple(
            mode
            for mode in strategy.supported_precisions
            if mode in on_device and catalog.select_precision(strategy, accelerator_name, mode)
        )
        default = (
            strategy.default_precision or accelerator.spec.precision.default or DEFAULT_PRECISION
        )
        backend = strategy.backend or accelerator.backend
    hooks = accelerator.spec.step_hooks
    step_hooks = {
        point: path
        for point, path in (
            ("after_backward", hooks.after_backward),
            ("after_optimizer_step", hooks.after_optimizer_step),
        )
        if path is not None
    }
    keywords = [
        ("default_precision", literal(default)),
        ("precisions", "PRECISIONS" if precisions == PRECISIONS else literal(precisions)),
        # The name the process group runs under (the spec's own where torch names it at run time).
        ("backend", literal(backend.torch_name or backend.name)),
    ]
    if tuple(backend.reduce_ops) != REDUCE_OPS:
        keywords.append(("reduce_ops", literal(tuple(backend.reduce_ops))))
    if backend.casts:
        keywords.append(("casts", literal(dict(backend.casts))))
    if step_hooks:
        keywords.append(("step_hooks", literal(step_hooks)))
    if backend.from_device_map:
        keywords.append(("backend_from_device_map", "True"))
    probes = {m: p for m, p in (accelerator.spec.precision.probes or {}).items() if m in precisions}
    if probes:
        keywords.append(("probes", literal(probes)))
    return _call("Expectation", [], keywords)


def baseline_expectations(catalog: Catalog, accelerators: Iterable[str]) -> list[tuple[str, str]]:
    """(constant name, ``Expectation(...)``) for each accelerator: what a strategy that
    declares nothing of its own does there, shared by the test modules (``spec_facts``)."""
    return [(f"ON_{_constant(name)}", _expectation(catalog, None, name)) for name in accelerators]


def _changed_options(strategy: Strategy) -> dict[str, Any]:
    """The options a strategy declares, or gives another default than its parent's."""
    inherited = strategy.parent.options if strategy.parent is not None else {}
    return {
        name: option.default
        for name, option in strategy.options.items()
        if name not in inherited or inherited[name].default != option.default
    }


def options_name(strategy: Strategy) -> str:
    """The constant of ``spec_facts`` that holds a strategy's options: its own where it
    declares any (or changes a default), else its parent's."""
    while not _changed_options(strategy) and strategy.parent is not None:
        strategy = strategy.parent
    return f"{_constant(strategy.name)}_OPTIONS"


def shared_options(strategies: Iterable[Strategy]) -> list[tuple[str, str]]:
    """(constant name, dict literal) of the options of every strategy that declares some, a
    parent's before its children's: each built from its parent's and the options it declares
    or gives another default, shared by the test modules (``spec_facts``)."""
    found: dict[str, str] = {}

    def add(strategy: Strategy) -> None:
        name = options_name(strategy)
        if name in found or not strategy.options:
            return
        owner = strategy
        while not _changed_options(owner) and owner.parent is not None:
            owner = owner.parent
        parent = owner.parent
        items = [f"{literal(k)}: {literal(v)}" for k, v in _changed_options(owner).items()]
        if parent is not None and parent.options:
            add(parent)
            items.insert(0, f"**{options_name(parent)}")
        found[name] = "{" + ", ".join(items) + "}"

    for strategy in strategies:
        add(strategy)
    return list(found.items())


def _constant(text: str) -> str:
    return re.sub(r"\W", "_", text, flags=re.ASCII).upper()


def _strategy_rows(
    catalog: Catalog, strategies: list[Strategy], accelerators: Iterable[str], tables: TestTables
) -> None:
    chosen = set(accelerators)
    baselines: dict[str, str] = {}
    for strategy in strategies:
        if strategy.abstract:
            tables.abstract.append(strategy.class_name)
            continue
        expected = []
        for name in (a for a in strategy.accelerators if a in chosen):
            if name not in baselines:
                baselines[name] = _expectation(catalog, None, name)
            text = _expectation(catalog, strategy, name)
            if text == baselines[name]:  # what the accelerator's spec says, as every module
                expected.append((name, f"ON_{_constant(name)}"))
                tables.shared.add(f"ON_{_constant(name)}")
            else:
                constant = f"{_constant(strategy.name)}_ON_{_constant(name)}"
                tables.expectations.append((constant, text))
                tables.uses.update(
                    ["Expectation", *(["PRECISIONS"] if "precisions=PRECISIONS" in text else [])]
                )
                expected.append((name, constant))
        devices = processes_per_node(strategy)
        presets = {strategy.name: {}, **strategy.aliases}
        keywords = [
            ("expected", "{" + ", ".join(f"{literal(a)}: {c}" for a, c in expected) + "}"),
            ("devices", str(devices)),
        ]
        if strategy.options:
            keywords.append(("options", options_name(strategy)))
            tables.shared.add(options_name(strategy))
        keywords.append(("presets", literal(presets)))
        if strategy.base == "parallel":
            keywords.append(("parallel", "True"))
        positional = [literal(strategy.name), strategy.class_name]
        tables.strategies.append(_call("StrategyRow", positional, keywords))
        tables.uses.add("StrategyRow")


def _accelerator_row(accelerator: Accelerator) -> str:
    spec = accelerator.spec
    keywords = [
        ("device_type", literal(spec.device_type)),
        ("indexed", literal(spec.indexed)),
        ("counted", literal(spec.device_count is not None)),
    ]
    if spec.visible_devices_env:
        keywords.append(("visible_devices_env", literal(spec.visible_devices_env)))
    if spec.requires:
        keywords.append(("requires", literal(spec.requires[0].module)))
    positional = [literal(accelerator.name), accelerator.class_name]
    return _call("AcceleratorRow", positional, keywords)


def _plugin_row(plugin: PrecisionPlugin) -> str:
    positional = [literal(plugin.name), plugin.class_name]
    return _call("PrecisionPluginRow", positional, [("modes", literal(plugin.modes))])


def test_tables(
    catalog: Catalog,
    strategies: list[Strategy],
    accelerator: Accelerator | None,
    environments: list[ClusterEnvironment],
    plugins: list[PrecisionPlugin],
    accelerators: Iterable[str],
) -> TestTables:
    """The tables of one spec file's test module; ``accelerators`` are those the package has."""
    tables = TestTables()
    entries: list[Strategy | Accelerator | ClusterEnvironment | PrecisionPlugin] = [
        *strategies,
        *([accelerator] if accelerator else []),
        *environments,
        *plugins,
    ]
    tables.classes.update(entry.class_name for entry in entries)
    _strategy_rows(catalog, strategies, accelerators, tables)
    if accelerator is not None:
        tables.accelerators.append(_accelerator_row(accelerator))
        tables.uses.add("AcceleratorRow")
    for env in environments:
        if env.abstract:
            tables.abstract.append(env.class_name)
        else:
            tables.environments.append(environment_row(catalog, env, tables.uses))
    for plugin in plugins:
        if plugin.abstract:
            tables.abstract.append(plugin.class_name)
        else:
            tables.plugins.append(_plugin_row(plugin))
            tables.uses.add("PrecisionPluginRow")
    return tables


# The jobs a row describes, by the name ``stratcore.testing`` exports them under.
_JOBS: dict[str, Mapping[str, Any]] = {
    "EXAMPLE_JOB": {**EXAMPLE_JOB, **EXAMPLE_LAYOUT},
    "UNEVEN_JOB": UNEVEN_JOB,
    "SINGLE_PROCESS_JOB": SINGLE_PROCESS_JOB,
}
# The inputs special parsers turn into a reading.
_PARSER_EXAMPLES: dict[str, tuple[str, str, Any]] = {
    # parser: (variable it is meant for, input, expected reading)
    "slurm_first_host": ("SLURM_NODELIST", "node[07-09],gpu1", "node07"),
    "slurm_job_port": ("SLURM_JOB_ID", "1234567", 19567),
    "lsf_first_host": ("LSB_DJOB_RANKFILE", "<rankfile>", "<hostname>"),
    "lsf_node_rank": ("LSB_DJOB_RANKFILE", "<rankfile>", 0),
    "lsf_job_port": ("LSB_JOBID", "98765", 23765),
}
#: Parsers that derive a port from their scheduler's job id only; any other variable they
#: read holds the port itself.
_JOB_PORT_PARSERS = ("slurm_job_port", "lsf_job_port")
RANKFILE = "launchhost\n<hostname>\n<hostname>\notherhost\notherhost\n"


@dataclass
class _Job:
    """The variables (and files) under which an environment describes one of ``_JOBS``, and
    what it then reads."""

    environ: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    expected: dict[str, Any] = field(default_factory=dict)


def _job(env: ClusterEnvironment, job: Mapping[str, Any]) -> _Job:
    """``env``'s variables for ``job`` (each value where the environment reads it, the special
    parsers' inputs where it parses them, and every variable its detection needs), and the
    values it reads then. A layout value the environment does not say is expected as None."""
    values = env.values
    found = _Job()
    environ, files, expected = found.environ, found.files, found.expected
    for key in (*ENVIRONMENT_VALUES, *LAYOUT_VALUES):
        source: ValueSource | None = values.get(key)
        if source is None:
            if key in LAYOUT_VALUES:
                expected[key] = None
            continue
        raw, reading = str(job[key]), job[key]
        parser_example = _PARSER_EXAMPLES.get(source.parse) if source.parse else None
        if parser_example is not None and (
            parser_example[0] in source.env or source.parse not in _JOB_PORT_PARSERS
        ):
            variable, raw, reading = parser_example
            if variable not in source.env:
                variable = source.env[0]
        elif source.env:
            variable = source.env[0]
        elif source.default is not None:
            expected[key] = source.default
            continue
        else:
            continue
        if raw == "<rankfile>":
            files[variable] = RANKFILE
        elif variable in environ:
            # Two readings from one variable (Kubeflow's RANK is rank and node rank).
            reading = int(environ[variable]) if isinstance(reading, int) else environ[variable]
        else:
            environ[variable] = raw
        expected[key] = reading
    detect: Condition = values["detect"] or Condition()
    for variable in detect.all_set:
        if variable not in environ and variable not in files:
            environ[variable] = "1"
    if detect.any_set and not any(v in environ or v in files for v in detect.any_set):
        environ[detect.any_set[0]] = "4"
    for variable in detect.not_equal:
        environ.setdefault(variable, "training-job")
    return found


def _readings(expected: dict[str, Any], job: str, uses: set[str]) -> str:
    """``expected`` as source: the job's constant (``EXAMPLE_JOB``, with ``EXAMPLE_LAYOUT``
    where the environment says the layout), with what the environment reads otherwise."""
    layout = [key for key in LAYOUT_VALUES if expected.get(key) is not None]
    said = {k: v for k, v in expected.items() if v is not None or k not in LAYOUT_VALUES}
    if job == "EXAMPLE_JOB":
        constants = ["EXAMPLE_JOB", *(["EXAMPLE_LAYOUT"] if layout else [])]
        reference = {**EXAMPLE_JOB, **(EXAMPLE_LAYOUT if layout else {})}
        expected = said
    else:
        constants, reference = [job], dict(_JOBS[job])
    if set(expected) != set(reference):
        return literal(expected)
    uses.update(constants)
    differs = [f"{literal(k)}: {literal(v)}" for k, v in expected.items() if reference[k] != v]
    if len(constants) == 1 and not differs:
        return constants[0]
    return "{" + ", ".join([*(f"**{c}" for c in constants), *differs]) + "}"


def _job_variables(found: _Job, job: str, uses: set[str]) -> str:
    """A ``JobVariables(...)`` call for ``found``, a description of ``job``."""
    uses.add("JobVariables")
    keywords = [
        ("environ", literal(found.environ)),
        ("files", literal(found.files)),
        ("expected", _readings(found.expected, job, uses)),
    ]
    return _call("JobVariables", [], keywords)


def environment_row(catalog: Catalog, env: ClusterEnvironment, uses: set[str]) -> str:
    """A consistent set of variables under which ``env`` must be detected, the values it must
    then read, and the variables whose absence (or refused value) must not detect it, as a
    ``testing.EnvironmentRow(...)`` call; the names of ``stratcore.testing`` it is written with
    go into ``uses``.

    Environments that number the processes themselves (not ``settable``, the global rank read
    from a variable) describe ``UNEVEN_JOB`` too; those that run inside others (``runs_inside``)
    describe the example job again under each outer one's variables for a step of one process
    (``SINGLE_PROCESS_JOB``: srun running ``ray start``), which they must win over.
    """
    values = env.values
    found = _job(env, _JOBS["EXAMPLE_JOB"])
    environ, files = found.environ, found.files
    detect: Condition = values["detect"] or Condition()
    negatives: list[tuple[str, str | None]] = [(variable, None) for variable in detect.all_set]
    negatives.extend((variable, "1") for variable in detect.none_set)
    for variable, refused in detect.not_equal.items():
        negatives.extend((variable, value) for value in refused)
    external = values["creates_processes_externally"] or Condition(always=True)
    if detect.always:
        negatives = []
    keywords = [
        ("environ", literal(environ)),
        ("files", literal(files)),
        ("expected", _readings(found.expected, "EXAMPLE_JOB", uses)),
        ("external", literal(external.holds(environ))),
    ]
    if negatives:
        keywords.append(("negatives", literal(negatives)))
    rank_source: ValueSource | None = values.get("global_rank")
    if not values.get("settable") and rank_source is not None and rank_source.env:
        uneven = _job(env, _JOBS["UNEVEN_JOB"])
        keywords.append(("uneven", _job_variables(uneven, "UNEVEN_JOB", uses)))
    inside = []
    for outer_name in values.get("runs_inside") or ():
        outer = _job(catalog.environments[outer_name], _JOBS["SINGLE_PROCESS_JOB"])
        both = _Job(
            environ={**outer.environ, **environ},
            files={**outer.files, **files},
            expected=found.expected,
        )
        inside.append(f"{literal(outer_name)}: {_job_variables(both, 'EXAMPLE_JOB', uses)}")
    if inside:
        keywords.append(("inside", "{" + ", ".join(inside) + "}"))
    uses.add("EnvironmentRow")
    return _call("EnvironmentRow", [literal(env.name), env.class_name], keywords)
