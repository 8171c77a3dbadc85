"""Simulates a machine without fairscale: an import hook makes ``fairscale`` unfindable (as
``importlib.util.find_spec`` and ``import`` see it) before the package is imported, then the
script reports what each fairscale-based component does. Prints ``RESULT <json>``."""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import sys
from typing import Any


class HideFairscale(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "fairscale" or name.startswith("fairscale."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, HideFairscale())


def attempt(action: Any) -> dict[str, str]:
    try:
        action()
    except Exception as error:
        return {"error": type(error).__name__, "message": str(error)}
    return {"error": "", "message": ""}


def main() -> int:
    import stratlib

    try:
        findable = importlib.util.find_spec("fairscale") is not None
    except ImportError:
        findable = False
    report: dict[str, Any] = {
        "fairscale_findable": findable,
        "fairscale_imported": "fairscale" in sys.modules,
    }
    report["ddp_sharded"] = attempt(
        lambda: stratlib.get_strategy("ddp_sharded", accelerator="cpu", devices=2)
    )
    report["ddp_sharded_spawn"] = attempt(
        lambda: stratlib.get_strategy("ddp_sharded_spawn", accelerator="cpu", devices=2)
    )
    report["ddp_sharded_16_mixed"] = attempt(
        lambda: stratlib.get_strategy(
            "ddp_sharded", accelerator="cpu", devices=2, precision="16-mixed"
        )
    )
    report["ddp_fully_sharded"] = attempt(lambda: stratlib.DDPFullyShardedStrategy())
    report["sharded_plugin"] = attempt(
        lambda: stratlib.ShardedNativeMixedPrecisionPlugin("16-mixed")
    )
    report["fsdp"] = attempt(lambda: stratlib.get_strategy("fsdp", accelerator="cpu", devices=2))
    report["listed_unavailable"] = sorted(
        info.name
        for info in stratlib.list_strategies()
        if not info.available and info.name.startswith("ddp_")
    )
    print("RESULT " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
