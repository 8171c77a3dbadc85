"""The JSON Schema of spec files, derived from the typed model so the two never drift."""

from __future__ import annotations

import dataclasses
import json
import keyword
import types
import typing
from typing import Any, Literal, Union

from stratcore.contract import Pattern

from .model import SpecFile
from .parse import spec_fields, type_hints

SCHEMA_ID = "https://stratgen.dev/schema/spec-v1.json"
#: Python keywords (soft ones too) that a name may not be.
KEYWORDS = sorted(set(keyword.kwlist) | set(keyword.softkwlist))


def _schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    if tp is Any:
        return {}
    if origin is typing.Annotated:
        inner = _schema(tp.__origin__, defs)
        for meta in tp.__metadata__:
            if isinstance(meta, Pattern):
                inner["pattern"] = meta.regex
                inner["description"] = meta.what
                if not meta.keyword_ok:
                    inner["not"] = {"enum": KEYWORDS}
        return inner
    if origin is Literal:
        return {"enum": list(typing.get_args(tp))}
    if origin in (Union, types.UnionType):
        members = typing.get_args(tp)
        options = [_schema(m, defs) for m in members if m is not type(None)]
        if type(None) in members:
            options.append({"type": "null"})
        return options[0] if len(options) == 1 else {"anyOf": options}
    if origin is tuple:
        item = _schema(typing.get_args(tp)[0], defs)
        scalar = "$ref" not in item and item.get("type") not in ("object", "array")
        array = {"type": "array", "items": item}
        return {"anyOf": [array, item]} if scalar else array
    if origin is dict:
        key, value = typing.get_args(tp)
        return {
            "type": "object",
            "propertyNames": _schema(key, defs),
            "additionalProperties": _schema(value, defs),
        }
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # placeholder against recursion
            defs[name] = _object(tp, defs)
        ref = {"$ref": f"#/$defs/{name}"}
        shorthand = getattr(tp, "__shorthand__", None)
        if shorthand:
            return {"anyOf": [ref, _schema(type_hints(tp)[shorthand], defs)]}
        return ref
    return {
        str: {"type": "string"},
        int: {"type": "integer"},
        float: {"type": "number"},
        bool: {"type": "boolean"},
    }[tp]


def _object(cls: Any, defs: dict[str, Any]) -> dict[str, Any]:
    hints = type_hints(cls)
    properties = {}
    required = []
    for f in spec_fields(cls):
        prop = _schema(hints[f.name], defs)
        doc = f.metadata.get("doc")
        if doc:
            prop = (
                {**prop, "description": doc}
                if "$ref" not in prop
                else {"allOf": [prop], "description": doc}
            )
        if (
            f.default is not dataclasses.MISSING
            and f.default is not None
            and not isinstance(f.default, tuple | dict)
        ):
            prop["default"] = f.default
        properties[f.name] = prop
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    result: dict[str, Any] = {
        "type": "object",
        "description": (cls.__doc__ or "").strip(),
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        result["required"] = required
    return result


def spec_schema() -> dict[str, Any]:
    defs: dict[str, Any] = {}
    root = _object(SpecFile, defs)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "stratgen spec file",
        **root,
        "$defs": dict(sorted(defs.items())),
    }


def schema_text() -> str:
    return json.dumps(spec_schema(), indent=2) + "\n"
