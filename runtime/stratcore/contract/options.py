"""Options: the types an option of a strategy may have, and which Python values fit each.

Importing this module must not import torch: the generator imports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, get_args

#: Types an option of a strategy may have.
OptionType = Literal["bool", "int", "float", "str", "path", "mapping", "sequence", "any"]
OPTION_TYPES: tuple[str, ...] = get_args(OptionType)

#: The Python types a spec literal of each option type may have.
OPTION_PYTYPES: dict[str, tuple[type, ...]] = {
    "bool": (bool,),
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "path": (str,),
    "mapping": (dict,),
    "sequence": (list, tuple),
    "any": (object,),
}


def value_fits(value: Any, types: Iterable[str]) -> bool:
    """Whether a literal from a spec has one of the option types (a bool is no number)."""
    for t in types:
        if isinstance(value, bool) and t in ("int", "float"):
            continue
        if isinstance(value, OPTION_PYTYPES[t]):
            return True
    return False
