"""How the runtime's and the generator's messages word a near miss.

A user who mistypes a name (a strategy, an option, a spec key, a target) gets, in the same
one-line error, the names close to it: ``" (did you mean 'ddp_spawn'?)"``. Both packages import
this module, so a mistake reads the same whether the generator or a training job catches it.
It imports nothing but the standard library.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["close_names", "did_you_mean"]

#: How many close names a message offers, at most.
MAX_SUGGESTIONS = 3
#: How close a name must be (difflib's ratio, 0 to 1) to be offered.
CUTOFF = 0.6


def close_names(word: str, choices: Iterable[str]) -> list[str]:
    """The names of ``choices`` close to ``word``, closest first, at most
    ``MAX_SUGGESTIONS``."""
    return difflib.get_close_matches(word, list(choices), n=MAX_SUGGESTIONS, cutoff=CUTOFF)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'a'?)"`` or ``" (did you mean 'a' or 'b'?)"`` for the names of
    ``choices`` close to ``word``, closest first; an empty string when none is close."""
    close = close_names(word, choices)
    if not close:
        return ""
    named = [repr(name) for name in close]
    listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " or " + named[-1]
    return f" (did you mean {listed}?)"
