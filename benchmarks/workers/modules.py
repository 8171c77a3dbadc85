"""Which modules a piece of work imports, in a fresh interpreter.

``python -m benchmarks.workers.modules import --out result.json``: ``import torch``, then
``import stratlib``; reports what stratlib added and which heavy or optional modules are loaded.

``python -m benchmarks.workers.modules cli --out result.json -- ARGS``: runs
``stratgen ARGS`` in this process, then reports which heavy modules it loaded.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import Any

#: Modules that ``import stratlib`` must not load: optional engines, Lightning (a comparison
#: only), and the generator's own dependencies.
HEAVY = (
    "deepspeed",
    "fairscale",
    "lightning",
    "lightning_fabric",
    "pytorch_lightning",
    "apex",
    "torch_xla",
    "horovod",
    "bagua",
    "habana_frameworks",
    "intel_extension_for_pytorch",
    "jinja2",
    "yaml",
    "black",
    "stratgen",
    "copier",
)
#: What a stratgen command may or may not need to load.
GENERATOR_DEPENDENCIES = ("jinja2", "yaml", "black", "torch")


def _tops(names: set[str]) -> list[str]:
    return sorted({name.split(".")[0] for name in names})


def imports() -> dict[str, Any]:
    import torch  # noqa: F401

    after_torch = set(sys.modules)
    import stratlib  # noqa: F401

    after = set(sys.modules)
    added = after - after_torch
    return {
        "added_modules": len(added),
        "added_outside_stratlib": sorted(m for m in added if not m.startswith("stratlib")),
        "added_top_level": _tops(added),
        "heavy_loaded": [m for m in HEAVY if m in after],
        "heavy_loaded_by_torch": [m for m in HEAVY if m in after_torch],
    }


def cli(arguments: list[str]) -> dict[str, Any]:
    from stratgen.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = main(arguments, out=out, err=err)
    return {
        "exit_code": code,
        "loaded": {name: name in sys.modules for name in GENERATOR_DEPENDENCIES},
        "stderr": err.getvalue()[-2000:],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("import", "cli"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("arguments", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    arguments = [a for a in args.arguments if a != "--"]
    result = imports() if args.what == "import" else cli(arguments)
    args.out.write_text(json.dumps(result), encoding="utf-8")


if __name__ == "__main__":
    main()
