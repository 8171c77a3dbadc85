"""One name per concept: a spec key and the class attribute that holds its value share a name.

The rule, stated once (ARCHITECTURE.md, "Names"): spec key ``k`` becomes the class attribute
``k``, unless its value is something the class acts through, which has a method of that name
(Lightning's API: ``is_available()``, ``detect()``, ``world_size()``, ``launcher``); then the
attribute says what the value is: ``k_hook`` for the import path of a function the class calls,
``k_condition`` for a ``Condition``, ``k_source`` for a ``ValueSource``, ``launcher_class``
for the launcher. Two nested mappings flatten: ``precision: {default, supported, probes}``
becomes ``default_precision``, ``supported_precisions`` and ``precision_probes``; ``step_hooks: {after_backward, ...}``
becomes ``after_backward_hook``, ....

The test reads the built-in specs as plain YAML, applies the rule on its own and compares each
value the spec writes with the attribute of the class generated for it. It does not use the
generator's own mapping, so a renamed attribute or key on either side fails here.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from stratcore.contract import ENVIRONMENT_VALUES, LAYOUT_VALUES

SPECS = Path(__file__).resolve().parents[2] / "specs"

#: Keys that shape the class rather than become one of its attributes: its name, module and
#: docstring, its place in the hierarchy, constructor options and registry presets; and what
#: only its documentation shows (an accelerator's product, the title of the device's page).
STRUCTURAL = {
    "class_name",
    "description",
    "module",
    "abstract",
    "extends",
    "base",
    "kind",
    "product",
}
STRUCTURAL_STRATEGY = STRUCTURAL | {"options", "aliases"}

#: Where each section's classes are exported.
PACKAGES = {
    "accelerator": "stratlib.accelerators",
    "strategies": "stratlib.strategies",
    "precision_plugins": "stratlib.precision",
    "cluster_environments": "stratlib.environments",
}

#: Keys whose value is the import path of a function the class calls.
FUNCTIONS = {
    "is_available",
    "current_device",
    "device_count",
    "set_device",
    "teardown",
    "after_backward",
    "after_optimizer_step",
}
CONDITIONS = {"detect", "creates_processes_externally"}
#: The values every cluster environment reads from a ValueSource (the runtime's vocabulary).
VALUE_SOURCES = {*ENVIRONMENT_VALUES, *LAYOUT_VALUES}


def attribute_for(key: str) -> str:
    """The attribute the naming rule gives spec key ``key``."""
    if key in FUNCTIONS:
        return key + "_hook"
    if key in CONDITIONS:
        return key + "_condition"
    if key in VALUE_SOURCES:
        return key + "_source"
    if key == "launcher":
        return "launcher_class"
    return key


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, list) else (value,)


def _requires(value: list[Any]) -> tuple[tuple[str, str], ...]:
    return tuple(
        (r, "") if isinstance(r, str) else (r["module"], r.get("install", "")) for r in value
    )


def _condition(attribute: Any) -> dict[str, Any]:
    return {
        "always": attribute.always,
        "all_set": attribute.all_set,
        "any_set": attribute.any_set,
        "none_set": attribute.none_set,
        "not_equal": attribute.not_equal,
    }


def _condition_from_spec(value: dict[str, Any]) -> dict[str, Any]:
    return {
        "always": value.get("always", False),
        "all_set": _tuple(value.get("all_set", [])),
        "any_set": _tuple(value.get("any_set", [])),
        "none_set": _tuple(value.get("none_set", [])),
        "not_equal": {k: _tuple(v) for k, v in value.get("not_equal", {}).items()},
    }


def _source_from_spec(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        value = {"env": value}
    return {
        "env": _tuple(value.get("env", [])),
        "parse": value.get("parse"),
        "default": value.get("default"),
        "fallback": value.get("fallback"),
    }


def _source(attribute: Any) -> dict[str, Any]:
    return {
        "env": attribute.env,
        "parse": attribute.parse,
        "default": attribute.default,
        "fallback": attribute.fallback,
    }


def _pairs(requires: Any) -> tuple[tuple[str, str], ...]:
    return tuple((r.module, r.install) for r in requires)


def _needed_by_accelerators(cls: type, listed: list[Any]) -> tuple[tuple[str, str], ...]:
    """What every accelerator a strategy or precision plugin is for needs and its spec does not
    list: it needs that too, after what it lists."""
    from stratlib.registry import REGISTRY

    names = getattr(cls, "accelerators", ())
    if not names:
        return ()
    needs = [set(_pairs(REGISTRY.accelerators[a].requires)) for a in names]
    first = _pairs(REGISTRY.accelerators[names[0]].requires)
    modules = {module for module, _ in _requires(listed)}
    return tuple(r for r in first if all(r in n for n in needs) and r[0] not in modules)


def expected_and_actual(cls: type, key: str, value: Any) -> list[tuple[str, Any, Any]]:
    """(attribute, value the spec means, value the class holds) for one spec key."""
    if key == "precision":
        return [
            (name, want, getattr(cls, name))
            for name, want in (
                ("default_precision", value.get("default")),
                (
                    "supported_precisions",
                    _tuple(value["supported"]) if "supported" in value else None,
                ),
                ("precision_probes", value.get("probes")),
            )
            if want is not None
        ]
    if key == "step_hooks":
        return [
            (attribute_for(point), path, getattr(cls, attribute_for(point)))
            for point, path in value.items()
        ]
    name = attribute_for(key)
    actual = getattr(cls, name)
    if key == "requires":
        return [(name, _requires(value) + _needed_by_accelerators(cls, value), _pairs(actual))]
    if key == "backend":
        want = value["name"] if isinstance(value, dict) else value
        if want == "auto":  # the accelerator's backend, decided when the strategy runs
            return [(name, None, actual)]
        return [(name, want, actual.name)]
    if key == "launcher":
        return [(name, value, actual.name)]
    if key == "hooks":
        return [(name, Path(value).stem, actual.__name__.rpartition(".")[2])]
    if key in ("detect", "creates_processes_externally"):
        return [(name, _condition_from_spec(value), _condition(actual))]
    if key in VALUE_SOURCES:
        return [(name, _source_from_spec(value), _source(actual))]
    if isinstance(value, list):
        value = tuple(value)
    return [(name, value, actual)]


def _entities() -> list[tuple[str, str, dict[str, Any]]]:
    found = []
    for path in sorted(SPECS.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        for section in PACKAGES:
            entries = data.get(section) or []
            for entry in [entries] if isinstance(entries, dict) else entries:
                found.append((f"{path.name}:{section}:{entry['name']}", section, entry))
    return found


ENTITIES = _entities()


def _backends() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(SPECS.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        for entry in data.get("backends") or []:
            found.append((f"{path.name}:backends:{entry['name']}", entry))
        for strategy in data.get("strategies") or []:
            if isinstance(strategy.get("backend"), dict):
                found.append((f"{path.name}:{strategy['name']}:backend", strategy["backend"]))
    return found


BACKENDS = _backends()


@pytest.mark.parametrize("where, entry", BACKENDS, ids=[b[0] for b in BACKENDS])
def test_each_backend_key_is_the_field_of_the_same_name(where: str, entry: dict[str, Any]) -> None:
    from stratlib.registry import REGISTRY

    backend = REGISTRY.backends[entry["name"]]
    for key, value in entry.items():
        if key == "description":  # the docstring of the generated constant
            continue
        actual = getattr(backend, key)
        if key == "requires":
            actual, value = tuple((r.module, r.install) for r in actual), _requires(value)
        elif key == "reduce_ops":
            actual, value = set(actual), set(value)
        assert actual == value, f"{where}: {key!r} = {actual!r}, spec: {value!r}"


@pytest.mark.parametrize("where, section, entry", ENTITIES, ids=[e[0] for e in ENTITIES])
def test_each_spec_key_is_the_attribute_of_the_same_name(
    where: str, section: str, entry: dict[str, Any]
) -> None:
    cls = getattr(importlib.import_module(PACKAGES[section]), entry["class_name"])
    structural = STRUCTURAL_STRATEGY if section == "strategies" else STRUCTURAL
    for key, value in entry.items():
        if key in structural or (key == "name" and entry.get("abstract")):
            continue
        compared = expected_and_actual(cls, key, value)
        assert compared, f"{where}: spec key {key!r} compared with nothing"
        for attribute, want, actual in compared:
            assert actual == want, f"{where}: {key!r} -> {attribute} = {actual!r}, spec: {want!r}"


def test_the_rule_covers_every_spec_field() -> None:
    """Every field the spec language has (from its JSON Schema) is structural or has the
    attribute the rule names on the runtime base class of its section."""
    schema = yaml.safe_load((SPECS / "stratgen.schema.json").read_text(encoding="utf-8"))
    definitions = schema.get("$defs") or schema.get("definitions")
    bases = {
        "AcceleratorSpec": ("stratcore.accelerator", "Accelerator"),
        "StrategySpec": ("stratcore.strategy", "StrategyBase"),
        "PrecisionPluginSpec": ("stratcore.precision.base", "PrecisionBase"),
        "ClusterEnvironmentSpec": ("stratcore.environment", "ClusterEnvironmentBase"),
    }
    missing = []
    for definition, (module, name) in bases.items():
        cls = getattr(importlib.import_module(module), name)
        for key in definitions[definition]["properties"]:
            if key in STRUCTURAL_STRATEGY or key in ("precision", "step_hooks"):
                continue
            if not hasattr(cls, attribute_for(key)):
                missing.append(f"{definition}.{key} -> {name}.{attribute_for(key)}")
    assert not missing, "spec keys with no attribute of the rule's name: " + ", ".join(missing)
