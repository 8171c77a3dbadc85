"""Facts the generated tests check: what each strategy's spec says it does, and example
environments (SLURM, LSF, ...) under which each cluster environment must be detected."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from stratcore.contract import PRECISIONS

from .catalog import Catalog, ClusterEnvironment, Strategy
from .model import Condition, ValueSource
from .pyapi import literal


@dataclass
class StrategyTestFacts:
    """What a strategy's spec says it does, as literals for its generated tests."""

    strategy: Strategy
    #: (registry name, the options a strategy built under that name holds, as a literal)
    registry: list[tuple[str, str]]
    #: (accelerator name, a ``testing.Expectation(...)`` literal) for each accelerator it runs on
    expectations: list[tuple[str, str]]
    run_devices: int  # processes per node in the real-run tests
    parallel: bool

    @property
    def name(self) -> str:
        return self.strategy.name

    @property
    def class_name(self) -> str:
        return self.strategy.class_name


def _expectation(catalog: Catalog, strategy: Strategy, accelerator_name: str, devices: int) -> str:
    """What the spec says ``strategy`` does on one accelerator, as a constructor call."""
    accelerator = catalog.accelerators[accelerator_name]
    on_device = accelerator.spec.precision.supported or PRECISIONS
    precisions = tuple(
        mode
        for mode in strategy.supported_precisions
        if mode in on_device and catalog.select_precision(strategy, accelerator_name, mode)
    )
    default = strategy.default_precision or accelerator.spec.precision.default or "32-true"
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
    arguments = [
        f"devices={devices}",
        f"default_precision={literal(default)}",
        f"precisions={literal(precisions)}",
        # The name the process group runs under (the spec's own where torch names it at run time).
        f"backend={literal(backend.torch_name or backend.name)}",
        f"reduce_ops={literal(tuple(backend.reduce_ops))}",
    ]
    if backend.casts:
        arguments.append(f"casts={literal(dict(backend.casts))}")
    if step_hooks:
        arguments.append(f"step_hooks={literal(step_hooks)}")
    if backend.from_device_map:
        arguments.append("backend_from_device_map=True")
    probes = {m: p for m, p in (accelerator.spec.precision.probes or {}).items() if m in precisions}
    if probes:
        arguments.append(f"probes={literal(probes)}")
    return f"testing.Expectation({', '.join(arguments)})"


def strategy_test_facts(
    catalog: Catalog, strategy: Strategy, accelerators: Iterable[str]
) -> StrategyTestFacts:
    defaults = {name: option.default for name, option in strategy.options.items()}
    names: list[tuple[str, dict[str, Any]]] = [] if strategy.abstract else [(strategy.name, {})]
    names += list(strategy.aliases.items())
    registry = [(name, literal({**defaults, **preset})) for name, preset in names]
    single_process = (
        strategy.base != "parallel"
        or strategy.wrapper in ("dp", "ddp2")
        or strategy.launcher == "none"
    )
    devices = 1 if single_process else 2
    chosen = set(accelerators)
    expectations = [
        (name, _expectation(catalog, strategy, name, devices))
        for name in strategy.accelerators
        if name in chosen
    ]
    return StrategyTestFacts(
        strategy=strategy,
        registry=registry,
        expectations=expectations,
        run_devices=devices,
        parallel=strategy.base == "parallel",
    )


@dataclass
class EnvironmentTestCase:
    """A consistent set of variables under which an environment must be detected, and the
    values it must then read (literals for its generated test)."""

    name: str
    class_name: str
    abstract: bool
    environ: str
    files: str
    expected: str
    external: bool
    negatives: list[tuple[str, str | None]]


# Example values for each reading, and the inputs special parsers turn into them.
_EXAMPLES: dict[str, tuple[str, Any]] = {
    "world_size": ("4", 4),
    "global_rank": ("3", 3),
    "local_rank": ("1", 1),
    "node_rank": ("1", 1),
    "main_address": ("10.1.2.3", "10.1.2.3"),
    "main_port": ("29400", 29400),
}
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


def environment_test_case(env: ClusterEnvironment) -> EnvironmentTestCase:
    values = env.values
    environ: dict[str, str] = {}
    files: dict[str, str] = {}
    expected: dict[str, Any] = {}
    for key, (raw, reading) in _EXAMPLES.items():
        source: ValueSource | None = values.get(key)
        if source is None:
            continue
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
    negatives: list[tuple[str, str | None]] = []
    for variable in detect.all_set:
        if variable not in environ and variable not in files:
            environ[variable] = "1"
        negatives.append((variable, None))
    if detect.any_set and not any(v in environ or v in files for v in detect.any_set):
        environ[detect.any_set[0]] = "4"
    for variable, refused in detect.not_equal.items():
        environ.setdefault(variable, "training-job")
        negatives.extend((variable, value) for value in refused)
    external = values["creates_processes_externally"] or Condition(always=True)
    return EnvironmentTestCase(
        name=env.name,
        class_name=env.class_name,
        abstract=env.abstract,
        environ=literal(environ),
        files=literal(files),
        expected=literal(expected),
        external=external.holds(environ),
        negatives=[] if detect.always else negatives,
    )
