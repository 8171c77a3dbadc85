"""What the checks will run on: ``python -m benchmarks.gpu.workers.probe --out facts.json``.

Each kind of device the checks can run on here (``devices``: CUDA's first GPU with its name,
compute capability and memory; the first device of whichever accelerator ``torch.accelerator``
reports, through its device module, and the collective backend torch maps it to; the CPU),
torch and the libraries it was built with (CUDA, cuDNN, NCCL), and the versions of the packages
the checks use, without importing the optional ones (their metadata says which version is
installed, and where). No ``torch.cuda`` function but ``is_available`` is called where torch
sees no CUDA device.
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


def accelerator_facts(torch: Any, device_type: str) -> dict[str, Any]:
    """The first device of ``torch.accelerator``'s type, through its device module."""
    import torch.distributed as dist

    module = torch.get_device_module(device_type)
    name = str(module.get_device_name(0)) if hasattr(module, "get_device_name") else device_type
    description = f"{name} ({device_type}:0"
    if hasattr(module, "get_device_properties"):
        total = getattr(module.get_device_properties(0), "total_memory", None)
        if total:
            description += f", {total / 2**30:.1f} GiB"
    description += f"; {torch.accelerator.device_count()} visible)"
    backend = (
        dist.Backend.default_device_backend_map.get(device_type) if dist.is_available() else None
    )
    return {
        "type": device_type,
        "name": name,
        "description": description,
        "backend": backend or "none (torch maps no backend to it)",
    }


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
    devices: dict[str, dict[str, Any]] = {}
    if cuda:
        props = torch.cuda.get_device_properties(0)
        devices["cuda"] = {
            "name": torch.cuda.get_device_name(0),
            "description": (
                f"{torch.cuda.get_device_name(0)}, compute capability {props.major}.{props.minor}, "
                f"{props.total_memory / 2**30:.1f} GiB, {props.multi_processor_count} "
                f"multiprocessors ({torch.cuda.device_count()} visible)"
            ),
        }
        found["bf16_supported"] = torch.cuda.is_bf16_supported()
    accelerator = None
    if hasattr(torch, "accelerator"):
        accelerator = torch.accelerator.current_accelerator(check_available=True)
    if accelerator is not None and accelerator.type != "cpu":
        devices["accelerator"] = accelerator_facts(torch, accelerator.type)
    devices["cpu"] = {
        "name": "the CPU",
        "description": f"CPU: {platform.processor() or platform.machine()}",
    }
    found["devices"] = devices
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
