"""The JSON Schema of the spec format: the checked-in copy is current, it accepts every spec
stratgen accepts here, and it rejects the malformed specs whose fault is structural.

Schemas are checked with the small validator below, which knows exactly the keywords stratgen's
schema uses and refuses any other, so it cannot pass a schema it does not understand.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from stratgen.spec.yaml_loader import load_yaml
from tests.support.generator import BAD, FIXTURES, REPO, bad_files, run_cli

SCHEMA_FILE = REPO / "specs" / "stratgen.schema.json"
SCHEMA_COMMENT = "# yaml-language-server: $schema=stratgen.schema.json"

#: Malformed cases whose fault is in the shape of the document (types, keys, enumerations,
#: patterns); the others are about YAML itself or about specs relating to each other.
STRUCTURAL = [
    "12_unknown_key",
    "13_unknown_top_level_key",
    "14_wrong_types",
    "15_bad_enum",
    "16_bad_precision_name",
    "17_bad_identifiers",
    "18_python_keywords",
    "19_missing_required_keys",
    "38_hooks_outside_the_specs",
    "40_not_a_mapping",
]

ANNOTATIONS = {"$schema", "$id", "title", "description", "default"}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _same(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1."""
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


class Validator:
    def __init__(self, schema: dict[str, Any]) -> None:
        self.root = schema

    def errors(
        self, value: Any, schema: dict[str, Any] | None = None, path: str = "$"
    ) -> list[str]:
        schema = self.root if schema is None else schema
        found: list[str] = []
        for key, rule in schema.items():
            if key in ANNOTATIONS or key == "$defs":
                continue
            if key == "$ref":
                assert rule.startswith("#/$defs/"), rule
                found += self.errors(value, self.root["$defs"][rule[len("#/$defs/") :]], path)
            elif key == "type":
                if not TYPES[rule](value):
                    found.append(f"{path}: not {rule}")
            elif key == "enum":
                if not any(_same(value, choice) for choice in rule):
                    found.append(f"{path}: {value!r} not in {rule}")
            elif key == "pattern":
                if isinstance(value, str) and not re.search(rule, value):
                    found.append(f"{path}: {value!r} does not match {rule}")
            elif key == "not":
                if not self.errors(value, rule, path):
                    found.append(f"{path}: {value!r} matches a forbidden schema")
            elif key == "anyOf":
                if all(self.errors(value, option, path) for option in rule):
                    found.append(f"{path}: matches none of {len(rule)} alternatives")
            elif key == "allOf":
                for option in rule:
                    found += self.errors(value, option, path)
            elif key == "items":
                if isinstance(value, list):
                    for index, item in enumerate(value):
                        found += self.errors(item, rule, f"{path}[{index}]")
            elif key == "properties":
                if isinstance(value, dict):
                    for name, sub in rule.items():
                        if name in value:
                            found += self.errors(value[name], sub, f"{path}.{name}")
            elif key == "additionalProperties":
                if isinstance(value, dict):
                    known = schema.get("properties", {})
                    for name, item in value.items():
                        if name in known:
                            continue
                        if rule is False:
                            found.append(f"{path}: unknown key {name!r}")
                        elif rule is not True:
                            found += self.errors(item, rule, f"{path}.{name}")
            elif key == "propertyNames":
                if isinstance(value, dict):
                    for name in value:
                        found += self.errors(name, rule, f"{path}.<{name}>")
            elif key == "required":
                if isinstance(value, dict):
                    found += [f"{path}: missing {name!r}" for name in rule if name not in value]
            else:
                raise AssertionError(f"the test validator does not know the keyword {key!r}")
        return found


@pytest.fixture(scope="module")
def validator() -> Validator:
    return Validator(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


def _data(path: Path) -> Any:
    return load_yaml(path.read_bytes(), path.name).plain()


def test_checked_in_schema_is_what_stratgen_prints() -> None:
    result = run_cli("schema", "--project", REPO)
    assert result.code == 0 and result.err == ""
    assert result.out == SCHEMA_FILE.read_text(
        encoding="utf-8"
    ), "specs/stratgen.schema.json is stale: run `stratgen schema --write specs/stratgen.schema.json`"
    json.loads(result.out)


def test_schema_write_writes_the_same_text(tmp_path: Path) -> None:
    target = tmp_path / "schema.json"
    result = run_cli("schema", "--project", REPO, "--write", target)
    assert result.code == 0
    assert target.read_text(encoding="utf-8") == SCHEMA_FILE.read_text(encoding="utf-8")


def test_every_builtin_spec_points_editors_at_the_schema() -> None:
    specs = sorted((REPO / "specs").glob("*.yaml"))
    assert specs
    for spec in specs:
        first = spec.read_text(encoding="utf-8").split("\n", 1)[0]
        assert first == SCHEMA_COMMENT, f"specs/{spec.name} must start with {SCHEMA_COMMENT!r}"


def _accepted_specs() -> list[Path]:
    return sorted(
        [
            *(REPO / "specs").glob("*.yaml"),
            *FIXTURES.glob("minimal/specs/*.yaml"),
            *FIXTURES.glob("golden/*/specs/*.yaml"),
        ]
    )


@pytest.mark.parametrize("spec", _accepted_specs(), ids=lambda p: str(p.relative_to(REPO)))
def test_schema_accepts_every_valid_spec(validator: Validator, spec: Path) -> None:
    assert validator.errors(_data(spec)) == []


@pytest.mark.parametrize("case", STRUCTURAL)
def test_schema_rejects_structural_faults(validator: Validator, case: str) -> None:
    (file,) = bad_files(case)
    problems = validator.errors(_data(BAD / file))
    assert problems, f"the schema accepts {file}"


def test_schema_refuses_keywords_as_names(validator: Validator) -> None:
    spec = {"strategies": [{"name": "lambda", "class_name": "Lambda", "base": "parallel"}]}
    assert validator.errors(spec)
    spec["strategies"][0]["name"] = "lambda_"
    assert validator.errors(spec) == []


def test_validator_is_strict_about_types(validator: Validator) -> None:
    assert validator.errors({"version": True})  # true is not 1 in JSON
    assert validator.errors({"version": 1}) == []
    with pytest.raises(AssertionError, match="does not know"):
        Validator({"minimum": 1}).errors(3)
