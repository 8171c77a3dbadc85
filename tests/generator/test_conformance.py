"""Conformance: the generated tests of any valid spec pass.

Hypothesis writes specs of made-up CPU-backed devices covering the spec reference (indexed or
not, a device-count function or none, a visible-devices variable, gloo or a backend of its own
registered by an init hook over gloo with any reductions and casts, precision defaults and
supported sets, step hooks, a cluster environment of its own reading every value parser and
fallback, a strategy extending each built-in strategy that runs on the CPU, options of every
type, aliases), generates each into a project of its own, with the Lightning target too, and runs that
project's generated tests, whose real runs use 2 CPU processes (the Lightning plugins' tests
train with Lightning's Trainer and Fabric). They must pass.

Each run tries STRATGEN_CONFORMANCE_EXAMPLES specs (2 by default: each costs a minute or two
of training runs), chosen deterministically; specs that once failed are tests of their own.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from stratcore.testing import clean_environ, watch

from stratlib import registry

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("STRATGEN_CONFORMANCE_EXAMPLES", "2"))

#: Built-in strategies that run on the CPU with the packages of the test environment.
CPU_PARENTS = (
    "ddp",
    "ddp_spawn",
    "dp",
    "ddp2",
    "deepspeed",
    "fsdp",
    "ddp_sharded",
    "ddp_sharded_spawn",
)
CPU_PRECISIONS = ("32-true", "64-true", "bf16-mixed", "bf16-true")
REDUCE_OPS = ("sum", "product", "min", "max", "mean")
VISIBLE = "CONF_VISIBLE_DEVICES"

#: The device's software, importable by every process of the generated project.
DEVICE_MODULE = f'''\
"""A made-up CPU-backed device: its probes, hooks and collective library."""

import os

import torch.distributed as dist


def is_available() -> bool:
    return True


def device_count() -> int:
    visible = os.environ.get("{VISIBLE}")
    return len([v for v in visible.split(",") if v.strip()]) if visible is not None else 4


def register_backend() -> None:
    """Register 'confcomm', the device's collectives (gloo underneath)."""
    if "confcomm" not in dist.Backend.backend_list:
        dist.Backend.register_backend(
            "confcomm",
            lambda store, rank, size, timeout: dist.ProcessGroupGloo(store, rank, size, timeout),
            devices=["cpu"],
        )


def mark_step() -> None:
    pass


def after_backward() -> None:
    pass
'''

PYPROJECT = """\
[project]
name = "conformance"
version = "0.1.0"

[tool.stratgen]
package = "conflib"
"""


def _subset(items: tuple[str, ...], *, least: int = 1) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(items), min_size=least, unique=True).map(
        lambda chosen: [item for item in items if item in chosen]
    )


@st.composite
def precision_defaults(draw: Any, within: tuple[str, ...]) -> dict[str, Any]:
    supported = draw(_subset(within))
    return {"default": draw(st.sampled_from(supported)), "supported": supported}


@st.composite
def backends(draw: Any) -> str | dict[str, Any]:
    if draw(st.booleans()):
        return "gloo"
    backend: dict[str, Any] = {
        "name": "confcomm",
        "description": "The device's collective library (gloo underneath).",
        "init_hook": "conformdev:register_backend",
        # Every strategy sums (boolean decisions, the emulated mean): 'sum' is required.
        "reduce_ops": ["sum", *draw(_subset(REDUCE_OPS[1:], least=0))],
    }
    casts = draw(
        st.dictionaries(
            st.sampled_from(["int64", "int32", "int16"]),
            st.sampled_from(["float32", "float64"]),
            max_size=2,
        )
    )
    if casts:
        backend["casts"] = casts
    return backend


#: For each reading: the ways a scheduler may provide it (parser, or fallback, or default).
READINGS: dict[str, list[dict[str, Any]]] = {
    "world_size": [{"env": "CONF_NTASKS"}, {"env": ["CONF_WORLD", "CONF_NTASKS"], "parse": "int"}],
    "global_rank": [{"env": "CONF_PROCID"}, {"env": "CONF_PROCID", "parse": "int"}],
    "local_rank": [{"env": "CONF_LOCALID", "default": 0}, {"env": "CONF_LOCALID"}],
    "node_rank": [
        {"env": "CONF_NODEID", "default": 0},
        {"env": "CONF_RANKFILE", "parse": "lsf_node_rank"},
        {"env": "CONF_NODEID", "fallback": "ranks_per_node"},
    ],
    "main_address": [
        {"env": "CONF_NODELIST", "parse": "slurm_first_host"},
        {"env": "CONF_RANKFILE", "parse": "lsf_first_host"},
        {"env": "CONF_MAIN_ADDR", "parse": "str", "fallback": "hostname"},
        {"env": "CONF_MAIN_ADDR", "default": "127.0.0.1"},
    ],
    "main_port": [
        {"env": "CONF_JOB_ID", "parse": "slurm_job_port"},
        {"env": "CONF_JOB_ID", "parse": "lsf_job_port"},
        {"env": "CONF_PORT", "fallback": "free_port"},
        {"env": "CONF_PORT", "parse": "int", "default": 12910},
    ],
}


@st.composite
def cluster_environments(draw: Any) -> dict[str, Any]:
    environment: dict[str, Any] = {
        "name": "conf_scheduler",
        "class_name": "ConfSchedulerEnvironment",
        "description": "The device's job scheduler.",
        "detect": {"all_set": ["CONF_NTASKS", "CONF_PROCID"]},
    }
    if draw(st.booleans()):
        environment["detect"]["not_equal"] = {"CONF_JOB_NAME": ["bash", "interactive"]}
    if draw(st.booleans()):
        environment["creates_processes_externally"] = {"any_set": ["CONF_STEP_ID"]}
    for reading, sources in READINGS.items():
        environment[reading] = draw(st.sampled_from(sources))
    return environment


OPTION_TYPES: dict[str, st.SearchStrategy[Any]] = {
    "bool": st.booleans(),
    "int": st.integers(-1000, 1000),
    "float": st.floats(-10, 10, allow_nan=False).map(lambda v: round(v, 3)),
    "str": st.text("abcxyz_-", min_size=1, max_size=8),
    "path": st.sampled_from(["checkpoints", "runs/last"]),
    "mapping": st.just(None),
    "sequence": st.just(None),
    "any": st.one_of(st.integers(0, 9), st.text("ab", max_size=3)),
}


@st.composite
def options(draw: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Options of any types, and aliases presetting some of them."""
    chosen = draw(_subset(tuple(OPTION_TYPES), least=0))
    declared: dict[str, Any] = {}
    for kind in chosen:
        option: dict[str, Any] = {
            "type": kind,
            "default": draw(OPTION_TYPES[kind]),
            "doc": f"A {kind} option.",
        }
        if kind == "str" and draw(st.booleans()):
            option["choices"] = sorted({option["default"], "other"})
        declared[f"conf_{kind}"] = option
    aliases: dict[str, dict[str, Any]] = {}
    presettable = [name for name in declared if declared[name]["type"] in ("bool", "int", "str")]
    if presettable and draw(st.booleans()):
        name = draw(st.sampled_from(presettable))
        value = declared[name].get("choices", [None])[-1] or draw(
            OPTION_TYPES[declared[name]["type"]]
        )
        aliases["conf_preset"] = {name: value}
    return declared, aliases


@st.composite
def device_specs(draw: Any) -> dict[str, Any]:
    parent = draw(st.sampled_from(CPU_PARENTS))
    parent_class = registry.REGISTRY.strategies[parent].cls
    within = tuple(m for m in CPU_PRECISIONS if m in parent_class.supported_precisions)
    accelerator_precision = draw(precision_defaults(within))
    accelerator: dict[str, Any] = {
        "name": "conf",
        "class_name": "ConfAccelerator",
        "description": "A made-up training device; each device is a CPU process.",
        "device_type": "cpu",
        "indexed": draw(st.booleans()),
        "backend": "gloo",
        "precision": accelerator_precision,
    }
    # Devices that are processes (any number), or counted ones (a probe without a count
    # would mean one device, too few for 2 ranks).
    if draw(st.booleans()):
        accelerator["is_available"] = "conformdev:is_available"
        accelerator["device_count"] = "conformdev:device_count"
        if draw(st.booleans()):
            accelerator["visible_devices_env"] = VISIBLE
    hooks = draw(st.sampled_from(["none", "both", "shared"]))
    if hooks == "both":
        accelerator["step_hooks"] = {
            "after_backward": "conformdev:after_backward",
            "after_optimizer_step": "conformdev:mark_step",
        }
    elif hooks == "shared":
        accelerator["step_hooks"] = {
            "after_backward": "conformdev:mark_step",
            "after_optimizer_step": "conformdev:mark_step",
        }
    spec: dict[str, Any] = {"version": 1, "accelerator": accelerator}
    backend = draw(backends())
    if isinstance(backend, dict):
        spec["backends"] = [backend]
        accelerator["backend"] = backend["name"]
    environment = draw(cluster_environments())
    spec["cluster_environments"] = [environment]

    declared, aliases = draw(options())
    parallel: dict[str, Any] = {
        "name": "conf_parallel",
        "class_name": "ConfParallelStrategy",
        "extends": parent,
        "description": f"{parent} on the made-up device.",
        "accelerators": ["conf"],
        "cluster": draw(
            st.sampled_from(
                [
                    ["conf_scheduler", "lightning"],
                    ["torchelastic", "conf_scheduler", "lightning"],
                    ["conf_scheduler", "slurm", "lightning"],
                ]
            )
        ),
    }
    # A parent's own default must be one the device accepts (the spec is refused otherwise).
    if parent_class.default_precision is not None or draw(st.booleans()):
        parallel["precision"] = draw(precision_defaults(tuple(accelerator_precision["supported"])))
    if declared:
        parallel["options"] = declared
    if aliases:
        parallel["aliases"] = aliases
    strategies = [parallel]
    if draw(st.booleans()):
        strategies.insert(
            0,
            {
                "name": "conf_single",
                "class_name": "SingleConfStrategy",
                "base": "single_device",
                "description": "One made-up device.",
                "accelerators": ["conf"],
            },
        )
    spec["strategies"] = strategies
    return spec


# --- specs that once failed ------------------------------------------------------------------

#: A scheduler of its own whose port variable is read with 'slurm_job_port': that parser
#: derives a port from SLURM_JOB_ID only and reads any other variable as the port itself, but
#: the generated test expected a port derived from the job id.
OWN_JOB_PORT_VARIABLE: dict[str, Any] = {
    "version": 1,
    "accelerator": {
        "name": "conf",
        "class_name": "ConfAccelerator",
        "device_type": "cpu",
        "indexed": False,
        "backend": "confcomm",
        "precision": {"default": "32-true", "supported": ["32-true"]},
    },
    "backends": [
        {"name": "confcomm", "init_hook": "conformdev:register_backend", "reduce_ops": ["sum"]}
    ],
    "cluster_environments": [
        {
            "name": "conf_scheduler",
            "class_name": "ConfSchedulerEnvironment",
            "detect": {"all_set": ["CONF_NTASKS", "CONF_PROCID"]},
            "world_size": {"env": "CONF_NTASKS"},
            "global_rank": {"env": "CONF_PROCID"},
            "local_rank": {"env": "CONF_LOCALID", "default": 0},
            "node_rank": {"env": "CONF_NODEID", "default": 0},
            "main_address": {"env": "CONF_NODELIST", "parse": "slurm_first_host"},
            "main_port": {"env": "CONF_JOB_ID", "parse": "slurm_job_port"},
        }
    ],
    "strategies": [
        {
            "name": "conf_parallel",
            "class_name": "ConfParallelStrategy",
            "extends": "ddp",
            "accelerators": ["conf"],
            "cluster": ["conf_scheduler", "lightning"],
        }
    ],
}


#: An indexed CPU-backed device: processes get 'cpu:0', 'cpu:1', and CPU tensors carry no
#: index, so the api scenario's "moved to root_device" compared 'cpu' with 'cpu:0'.
INDEXED_CPU_DEVICE: dict[str, Any] = {
    "version": 1,
    "accelerator": {
        "name": "conf",
        "class_name": "ConfAccelerator",
        "device_type": "cpu",
        "indexed": True,
        "is_available": "conformdev:is_available",
        "device_count": "conformdev:device_count",
        "visible_devices_env": VISIBLE,
        "backend": "gloo",
    },
    "strategies": [
        {
            "name": "conf_single",
            "class_name": "SingleConfStrategy",
            "base": "single_device",
            "accelerators": ["conf"],
        }
    ],
}


def check_conformance(spec: dict[str, Any], folder: Path, *, lightning: bool = False) -> None:
    """Generate ``spec`` into a project of its own (with the Lightning target too, if
    ``lightning``) and run its generated tests."""
    project = folder / "project"
    (project / "specs").mkdir(parents=True)
    targets = 'targets = ["stratlib", "lightning"]\n' if lightning else ""
    (project / "pyproject.toml").write_text(PYPROJECT + targets, encoding="utf-8")
    text = yaml.safe_dump(spec, sort_keys=False)
    (project / "specs" / "conf.yaml").write_text(text, encoding="utf-8")
    (project / "conformdev.py").write_text(DEVICE_MODULE, encoding="utf-8")
    generate = watch.run(
        [sys.executable, "-m", "stratgen", "generate"],
        cwd=project,
        env=clean_environ({"PYTHONPATH": str(REPO / "generator"), "NO_COLOR": "1"}),
    )
    assert generate.returncode == 0, f"{text}\n{generate.stdout}{generate.stderr}"
    tests = watch.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            "generated/tests",
        ],
        what="the generated tests of the spec",
        cwd=project,
        env=clean_environ(
            {"PYTHONPATH": os.pathsep.join([str(project / "generated"), str(project)])}
        ),
    )
    assert (
        tests.returncode == 0
    ), f"the generated tests of this spec failed:\n{text}\n" + textwrap.indent(
        tests.stdout[-8000:] + tests.stderr[-2000:], "    "
    )
    assert " passed" in tests.stdout, tests.stdout


@pytest.mark.slow
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    # A failing example takes minutes to run; report it as found, without shrinking.
    phases=[Phase.generate],
)
@given(spec=device_specs(), lightning=st.just(True))
def test_generated_tests_of_any_device_spec_pass(
    spec: dict[str, Any], lightning: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    check_conformance(spec, tmp_path_factory.mktemp("conformance"), lightning=lightning)


@pytest.mark.slow
@pytest.mark.parametrize(
    "spec",
    [OWN_JOB_PORT_VARIABLE, INDEXED_CPU_DEVICE],
    ids=["own job port variable", "indexed cpu device"],
)
def test_generated_tests_of_specs_that_once_failed_pass(
    spec: dict[str, Any], tmp_path: Path
) -> None:
    """Specs that once failed the test above, each a test of its own (so that another worker
    can run it meanwhile)."""
    check_conformance(spec, tmp_path)
