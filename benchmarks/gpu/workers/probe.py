"""What the checks will run on: ``python -m benchmarks.gpu.workers.probe --out facts.json``.

The device (name, compute capability, memory), torch and the libraries it was built with
(CUDA, cuDNN, NCCL), and the versions of the packages the checks use, without importing the
optional ones (their metadata says which version is installed, and where).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import platform
import sys
from pathlib import Path
from typing import Any


def package(name: str, module: str) -> str | None:
    """The installed version of distribution ``name`` and where its ``module`` lives, or None
    where the module cannot be imported from here."""
    spec = importlib.util.find_spec(module)
    if spec is None:
        return None
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        version = "version unknown"
    origin = spec.origin or (list(spec.submodule_search_locations or []) or ["?"])[0]
    return f"{version} ({Path(origin).parent})"


def facts() -> dict[str, Any]:
    import torch

    cuda = torch.cuda.is_available()
    found: dict[str, Any] = {
        "cuda_available": cuda,
        "python": f"{platform.python_version()} ({sys.executable})",
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "none (a CPU build of torch)",
        "cudnn": str(torch.backends.cudnn.version()) if cuda else "-",
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else "-",
    }
    if cuda:
        props = torch.cuda.get_device_properties(0)
        found["device name"] = torch.cuda.get_device_name(0)
        found["device"] = (
            f"{torch.cuda.get_device_name(0)}, compute capability {props.major}.{props.minor}, "
            f"{props.total_memory / 2**30:.1f} GiB, {props.multi_processor_count} multiprocessors "
            f"({torch.cuda.device_count()} visible)"
        )
        found["bf16_supported"] = torch.cuda.is_bf16_supported()
    else:
        found["device name"] = "the CPU"
        found["device"] = f"CPU: {platform.processor() or platform.machine()}"
    found["packages"] = {
        "lightning": package("lightning", "lightning"),
        "transformers": package("transformers", "transformers"),
        "deepspeed": package("deepspeed", "deepspeed"),
        "pydantic": package("pydantic", "pydantic"),
    }
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.write_text(json.dumps(facts(), indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
