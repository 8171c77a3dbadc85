"""Test support: real multi-process scenarios for any strategy of the package.

The generated tests (and yours) run scenarios as ``python -m stratcore.testing --package PACKAGE
SCENARIO STRATEGY ...`` in a fresh process, so that every launcher, the script-relaunching one
included, works as it does for users. Each scenario prints one JSON line that the test reads.

Scenarios:
    train        train the reference model for a few SGD steps; print rank 0's final parameters
                 and the losses, reduced over ranks
    train_after_replacing_moves
                 train, where the strategy's move of the model gives it new Parameter
                 objects (as a move onto an XLA device does)
    collectives  every collective of the strategy; print each rank's view
    api          every method and property of the strategy API, the collectives included
    checkpoint   save, change, load, and print whether the state came back
    fail         make one rank raise, exit, kill itself or hang; the launch must fail, say which
                 rank, and leave no process behind
    cases        several of the above in one job, a launch each, each reported as it ends
                 (``--cases``, see ``scenarios.run_case``)

Modules: ``environ`` (the package under test, clean environments), ``reference`` (the reference
problem), ``scenarios`` (what runs in the launched processes), ``cli`` (``python -m``),
``processes`` (running scenarios, finding leftover processes), ``expectations`` (what a class
can run), ``assertions`` and ``devices`` (what generated tests assert), ``rows`` (the tables of
a generated test module), ``checks`` (the case each row feeds), ``jobs`` (one job for the
real-run cases of each strategy) and ``suite`` (the test classes generated modules run over
their tables; it imports pytest, so it is not imported here). Every other public name is here
too.
"""

from __future__ import annotations

from ..contract import PRECISIONS
from ..exceptions import MisconfigurationError, MissingDependencyError
from . import scenarios
from .assertions import (
    assert_api,
    assert_checkpoint_round_trip,
    assert_collectives,
    assert_hooks_called,
    assert_options,
    assert_parameters_close,
    assert_precision_plugin_trains,
    assert_precisions,
    assert_training_converges,
    assert_trains_in_precision,
    assert_trains_like_one_process,
)
from .checks import (
    assert_abstract_base,
    assert_registry_name,
    check_accelerator,
    check_environment,
    check_precision_plugin,
    check_real_run,
    check_strategy,
)
from .cli import main
from .devices import (
    assert_detection_priority,
    assert_device_parsing,
    assert_devices_addressed,
    assert_visible_devices_named,
    environment_values,
    expected_values,
    set_environment,
)
from .environ import (
    CLUSTER_VARIABLES,
    RUNTIME_ROOT,
    RUN_MARKER_ENV,
    clean_environ,
    cluster_variables,
    isolated_environment,
    package_environ,
    package_name,
    package_registry_in_use,
    use_package,
)
from .expectations import (
    PRECISION_TOLERANCE,
    Expectation,
    available_or_skip,
    expectation_for,
    precision_tolerance,
    precision_variant,
    reference_dtype,
    runnable_accelerator,
    runnable_or_skip,
    unavailable_plugin_reason,
    unavailable_reason,
)
from .jobs import JobReport, ScenarioJobs
from .processes import (
    FAILURE_STALL,
    FailureRun,
    assert_job_stopped,
    leftover_processes,
    run_failing_job,
    run_failure_scenario,
    run_scenario,
)
from .reference import (
    BATCH,
    FEATURES,
    LARGE_INT,
    reference_batch,
    reference_loss,
    reference_model,
    reference_parameters,
    shard,
)
from .rows import (
    ACCELERATOR_CASES,
    ENVIRONMENT_CASES,
    EXAMPLE_JOB,
    EXAMPLE_LAYOUT,
    RUN_CASES,
    STRATEGY_CASES,
    UNEVEN_JOB,
    AcceleratorRow,
    EnvironmentRow,
    JobVariables,
    PrecisionPluginRow,
    StrategyRow,
)
from .scenarios import API_METHODS, API_PROPERTIES, SCENARIOS, run_case

__all__ = [
    "ACCELERATOR_CASES",
    "AcceleratorRow",
    "API_METHODS",
    "API_PROPERTIES",
    "assert_abstract_base",
    "assert_api",
    "assert_checkpoint_round_trip",
    "assert_collectives",
    "assert_detection_priority",
    "assert_device_parsing",
    "assert_devices_addressed",
    "assert_hooks_called",
    "assert_job_stopped",
    "FAILURE_STALL",
    "run_failing_job",
    "assert_options",
    "assert_parameters_close",
    "assert_precision_plugin_trains",
    "assert_precisions",
    "assert_registry_name",
    "assert_training_converges",
    "assert_trains_in_precision",
    "assert_trains_like_one_process",
    "assert_visible_devices_named",
    "available_or_skip",
    "BATCH",
    "check_accelerator",
    "check_environment",
    "check_precision_plugin",
    "check_real_run",
    "check_strategy",
    "clean_environ",
    "cluster_variables",
    "CLUSTER_VARIABLES",
    "environment_values",
    "EnvironmentRow",
    "ENVIRONMENT_CASES",
    "EXAMPLE_JOB",
    "EXAMPLE_LAYOUT",
    "Expectation",
    "expectation_for",
    "expected_values",
    "FailureRun",
    "FEATURES",
    "isolated_environment",
    "JobReport",
    "JobVariables",
    "LARGE_INT",
    "leftover_processes",
    "main",
    "MisconfigurationError",
    "MissingDependencyError",
    "package_environ",
    "package_name",
    "package_registry_in_use",
    "precision_tolerance",
    "PRECISION_TOLERANCE",
    "PRECISIONS",
    "precision_variant",
    "PrecisionPluginRow",
    "reference_batch",
    "reference_dtype",
    "reference_loss",
    "reference_model",
    "reference_parameters",
    "run_case",
    "RUN_CASES",
    "run_failure_scenario",
    "RUN_MARKER_ENV",
    "run_scenario",
    "runnable_accelerator",
    "runnable_or_skip",
    "RUNTIME_ROOT",
    "ScenarioJobs",
    "scenarios",
    "SCENARIOS",
    "set_environment",
    "shard",
    "STRATEGY_CASES",
    "StrategyRow",
    "UNEVEN_JOB",
    "unavailable_plugin_reason",
    "unavailable_reason",
    "use_package",
]
