"""The contract between the spec language and the runtime, in one place.

Every vocabulary a spec may use, the runtime class each name stands for, the constructor
arguments the runtime takes, and the small value types both sides share. The generator derives
its spec model, JSON Schema and spec reference from these tables; the runtime imports the shared
types and the precision-plugin scoring; ``tests/architecture/test_contract.py`` checks that every
name has an implementation in the runtime and every implementation a name.

The modules, by kind:

- ``value_types``: ``Requirement``, ``Condition``, ``ValueSource``, ``LauncherOption``,
  ``Pattern`` and ``RuntimeClass`` (a runtime class named by module and class name);
- ``options``: the types an option may have, and which values fit them;
- ``collectives``: reduce ops and dtypes a backend may declare;
- ``precision``: precision names and aliases, precision kinds, how a plugin is chosen;
- ``package``: what a generated package is built on and imports from the runtime;
- ``strategies``: strategy bases, wrappers and the options each reads, constructor arguments;
- ``launchers``: launchers and the options each reads from its strategy;
- ``environments``: the values every cluster environment provides, and those of the layout
  some say besides;
- ``example_job``: the jobs the generated environment tests describe.

Every public name of these modules is importable from ``stratcore.contract`` itself. Importing
the package must not import torch: the generator imports it.
"""

from __future__ import annotations

from .collectives import DTYPES, REDUCE_OPS, DType, ReduceOp
from .environments import ENVIRONMENT_VALUES, LAYOUT_VALUES
from .example_job import EXAMPLE_JOB, EXAMPLE_LAYOUT, SINGLE_PROCESS_JOB, UNEVEN_JOB
from .launchers import GENERAL_LAUNCHERS, LAUNCHERS, LAUNCHER_OPTIONS
from .options import OPTION_PYTYPES, OPTION_TYPES, OptionType, value_fits
from .package import (
    ACCELERATOR_ROOT,
    DEEPSPEED_ACCELERATOR_ROOT,
    ENVIRONMENT_ROOT,
    LAUNCHER_ROOT,
    PACKAGE_EXPORTS,
    RAY_IMPORTS,
    REGISTRY_IMPORTS,
    STRATEGY_ROOT,
    VALUE_TYPES,
    deepspeed_accelerator_name,
)
from .precision import (
    DEFAULT_PRECISION,
    PRECISIONS,
    PRECISION_ALIASES,
    PRECISION_KINDS,
    PRECISION_ROOT,
    PrecisionName,
    best_plugin,
    plugin_score,
    specificity,
)
from .strategies import (
    BASES,
    CONSTRUCTOR_ARGUMENTS,
    CONSTRUCTOR_ARGUMENT_NAMES,
    PARALLEL_OPTIONS,
    ROOT_BASE,
    STRATEGY_KINDS,
    WRAPPERS,
    WrapperEntry,
    core_read_options,
)
from .value_types import (
    VALUE_FALLBACKS,
    VALUE_PARSERS,
    Condition,
    EnvVar,
    LauncherOption,
    ModulePath,
    Pattern,
    Requirement,
    RuntimeClass,
    ValueFallback,
    ValueParser,
    ValueSource,
    module_available,
)

__all__ = [
    "RuntimeClass",
    "ValueParser",
    "VALUE_PARSERS",
    "ValueFallback",
    "VALUE_FALLBACKS",
    "Pattern",
    "ModulePath",
    "EnvVar",
    "module_available",
    "Requirement",
    "Condition",
    "ValueSource",
    "LauncherOption",
    "OptionType",
    "OPTION_TYPES",
    "OPTION_PYTYPES",
    "value_fits",
    "ReduceOp",
    "REDUCE_OPS",
    "DType",
    "DTYPES",
    "PrecisionName",
    "PRECISIONS",
    "DEFAULT_PRECISION",
    "PRECISION_ALIASES",
    "PRECISION_ROOT",
    "PRECISION_KINDS",
    "specificity",
    "plugin_score",
    "best_plugin",
    "STRATEGY_ROOT",
    "ENVIRONMENT_ROOT",
    "ACCELERATOR_ROOT",
    "DEEPSPEED_ACCELERATOR_ROOT",
    "LAUNCHER_ROOT",
    "deepspeed_accelerator_name",
    "PACKAGE_EXPORTS",
    "REGISTRY_IMPORTS",
    "RAY_IMPORTS",
    "VALUE_TYPES",
    "BASES",
    "ROOT_BASE",
    "STRATEGY_KINDS",
    "PARALLEL_OPTIONS",
    "WrapperEntry",
    "WRAPPERS",
    "core_read_options",
    "CONSTRUCTOR_ARGUMENTS",
    "CONSTRUCTOR_ARGUMENT_NAMES",
    "LAUNCHERS",
    "LAUNCHER_OPTIONS",
    "GENERAL_LAUNCHERS",
    "ENVIRONMENT_VALUES",
    "LAYOUT_VALUES",
    "EXAMPLE_JOB",
    "EXAMPLE_LAYOUT",
    "UNEVEN_JOB",
    "SINGLE_PROCESS_JOB",
]
