"""The built-in devices are only specs: no module of the runtime names a device vendor.

Support for Habana, Intel, Huawei, Cambricon, Moore Threads and AMD hardware lives in
specs/*.yaml alone; the runtime (runtime/stratcore) implements what the spec language says,
for any device. This test reads every runtime source file, splits it into words (identifiers
split at underscores, dots and changes of case, so that ``HPUAccelerator`` and ``torch_npu``
count), and fails on any word that names one of those vendors, their devices, packages,
collective libraries or variables.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime" / "stratcore"

#: Words that name a vendor of a built-in device spec, its device, software or variables.
VENDOR_WORDS = {
    # Habana Gaudi
    "habana": "Habana",
    "gaudi": "Habana",
    "hpu": "Habana",
    "synapseai": "Habana",
    # Intel GPUs
    "intel": "Intel",
    "xpu": "Intel",
    "xccl": "Intel",
    "oneccl": "Intel",
    "ipex": "Intel",
    # Huawei Ascend
    "huawei": "Huawei",
    "ascend": "Huawei",
    "npu": "Huawei",
    "hccl": "Habana and Huawei",
    "cann": "Huawei",
    # Cambricon
    "cambricon": "Cambricon",
    "mlu": "Cambricon",
    "cncl": "Cambricon",
    # Moore Threads
    "moore": "Moore Threads",
    "musa": "Moore Threads",
    "mccl": "Moore Threads",
    # AMD
    "amd": "AMD",
    "rocm": "AMD",
    "hip": "AMD",
    "rccl": "AMD",
}

_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def words(text: str) -> list[str]:
    """Every word of ``text``, lower-cased: runs of letters split at case changes, so that
    identifiers yield their parts (``HPUAccelerator`` -> hpu, accelerator)."""
    found = []
    for token in re.findall(r"[A-Za-z0-9]+", text):
        found += [part.lower() for part in _CAMEL.findall(token)]
    return found


def test_words_split_identifiers_as_the_check_needs() -> None:
    assert words("HPUAccelerator torch_npu.npu:is_bf16_supported") == [
        "hpu",
        "accelerator",
        "torch",
        "npu",
        "npu",
        "is",
        "bf",
        "16",
        "supported",
    ]
    assert "hip" not in words("relationship shipping")


SOURCES = sorted(RUNTIME.rglob("*.py"))


def test_the_runtime_has_sources_to_read() -> None:
    assert len(SOURCES) > 30, f"found only {len(SOURCES)} files under {RUNTIME}"


@pytest.mark.parametrize("path", SOURCES, ids=[p.relative_to(RUNTIME).as_posix() for p in SOURCES])
def test_no_runtime_module_names_a_device_vendor(path: Path) -> None:
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        named = sorted({w for w in words(line) if w in VENDOR_WORDS})
        if named:
            vendors = ", ".join(sorted({VENDOR_WORDS[w] for w in named}))
            found.append(f"{number}: {', '.join(named)} ({vendors}): {line.strip()}")
    assert not found, (
        f"runtime/stratcore/{path.relative_to(RUNTIME).as_posix()} names device vendors; their "
        "devices belong in specs/:\n" + "\n".join(found)
    )
