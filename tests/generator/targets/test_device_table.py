"""The devices x frameworks table: the devices page the docs target generates and `stratgen
list` say the same, and what they say follows from the specs.

The specs are read here as plain YAML, so the expectations do not come from the function that
builds the table: a device's stratlib cell names every strategy whose spec (or the spec it
extends) lists the device, its precisions cell every precision its spec supports, each probed
one after the probe that decides it, its DeepSpeed cell the class DeepSpeed itself has for the
device (by the names in the installed DeepSpeed's source) unless the spec asks for the generated
one, its Ray Train cell the spec's Ray resource and backend, and its install cell the spec's
install hints.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.generator import REPO, run_cli

SPECS = REPO / "specs"
#: The devices page's two tables: the devices (with what to install), then what runs on each.
DEVICE_COLUMNS = ["hardware", "install", "verified on"]
FRAMEWORK_COLUMNS = ["stratlib", "Lightning", "DeepSpeed", "Ray Train", "precisions"]
#: The cells `stratgen list` and the page show alike.
SHARED = ["stratlib", "DeepSpeed", "Ray Train", "precisions", "install"]


def deepspeeds_own_accelerators() -> list[str]:
    """The DS_ACCELERATOR names of DeepSpeed's own classes, read from the installed DeepSpeed's
    source (deepspeed/accelerator/real_accelerator.py) without importing it."""
    spec = importlib.util.find_spec("deepspeed")
    if spec is None or spec.origin is None:
        pytest.skip("DeepSpeed is not installed")
    source = Path(spec.origin).with_name("accelerator") / "real_accelerator.py"
    match = re.search(r"^SUPPORTED_ACCELERATOR_LIST = (\[.*?\])", source.read_text(), re.M)
    assert match, source
    names: list[str] = ast.literal_eval(match.group(1))
    return names


def _specs() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(SPECS.glob("*.yaml"))]


def _accelerators() -> dict[str, dict[str, Any]]:
    return {s["accelerator"]["name"]: s["accelerator"] for s in _specs() if "accelerator" in s}


def _strategies() -> dict[str, dict[str, Any]]:
    return {entry["name"]: entry for s in _specs() for entry in s.get("strategies", [])}


def _runs_on(name: str, strategies: dict[str, dict[str, Any]]) -> list[str]:
    """The strategy's accelerators, its own or inherited (through extends, else its base)."""
    entry = strategies[name]
    if "accelerators" in entry:
        return list(entry["accelerators"])
    parent = entry.get("extends") or (entry.get("base") if entry.get("base") != name else None)
    return _runs_on(parent, strategies) if parent else []


def _cluster(name: str, strategies: dict[str, dict[str, Any]]) -> list[str]:
    """The strategy's cluster environments, its own or inherited."""
    entry = strategies[name]
    if "cluster" in entry:
        return list(entry["cluster"])
    parent = entry.get("extends") or (entry.get("base") if entry.get("base") != name else None)
    return _cluster(parent, strategies) if parent else []


def _unescaped(cell: str) -> str:
    """A cell as it reads: Markdown's backslash escapes, '&lt;' and links' brackets undone."""
    cell = re.sub(r"<(https://[^>]+)>", r"\1", cell)
    return re.sub(r"\\(.)", r"\1", cell).replace("&lt;", "<")


def page_rows() -> dict[str, dict[str, str]]:
    """The rows of docs/devices/index.md's two tables, merged by device; each device's cell a
    link to its page."""
    text = (REPO / "docs" / "devices" / "index.md").read_text(encoding="utf-8")
    devices, frameworks = text.split("\n## Strategies and frameworks\n")
    rows: dict[str, dict[str, str]] = {}
    for table, columns in ((devices, DEVICE_COLUMNS), (frameworks, FRAMEWORK_COLUMNS)):
        for line in (line for line in table.splitlines() if line.startswith("| [")):
            cells = [_unescaped(c.strip()) for c in re.split(r"(?<!\\) \| ", line.strip("|"))]
            device = re.fullmatch(r"\[`(\w+)`\]\((\w+)\.md\)", cells[0])
            assert device is not None and device.group(1) == device.group(2), cells[0]
            rows.setdefault(device.group(1), {}).update(zip(columns, cells[1:], strict=True))
    return rows


def list_rows() -> dict[str, dict[str, str]]:
    result = run_cli("list", "--no-probe", "--project", REPO)
    assert result.code == 0, result.err
    blocks = result.out.split("Devices and frameworks:")[1].strip().split("\n\n")
    rows = {}
    for block in blocks:
        device, *lines = block.splitlines()
        cells = {}
        for line in lines:
            key, _, value = line.strip().partition(":")
            cells[key] = value.strip()
        rows[device] = cells
    return rows


def _lightning(listed: str) -> str:
    """What the page's Lightning column says of a framework's cell of `stratgen list`."""
    own, plugins = listed.startswith("Lightning's own"), "plugins: " in listed
    return (
        "Lightning's own and plugins"
        if own and plugins
        else "Lightning's own" if own else "plugins" if plugins else "no"
    )


def test_the_devices_page_and_stratgen_list_show_the_same_table() -> None:
    page, listed = page_rows(), list_rows()
    assert set(page) == set(listed) == set(_accelerators())
    for device, cells in page.items():
        assert {c: cells[c] for c in SHARED} == {c: listed[device][c] for c in SHARED}, device
        trainer = _lightning(listed[device]["Lightning Trainer"])
        fabric = _lightning(listed[device]["Lightning Fabric"])
        both = trainer if trainer == fabric else f"Trainer: {trainer}; Fabric: {fabric}"
        assert cells["Lightning"] == both, device


@pytest.mark.parametrize("device", sorted(_accelerators()))
def test_each_row_follows_from_the_specs(device: str) -> None:
    accelerator = _accelerators()[device]
    strategies = _strategies()
    row = page_rows()[device]
    expected = sorted(
        name
        for name, entry in strategies.items()
        if not entry.get("abstract") and device in _runs_on(name, strategies)
    )
    assert sorted(row["stratlib"].split(", ")) == expected
    precision = accelerator.get("precision", {})
    supported = precision.get("supported", [])
    for mode in supported:
        assert re.search(rf"(^|, |; ){re.escape(mode)}(,|;|$| where)", row["precisions"]), mode
    for mode, probe in (precision.get("probes") or {}).items():
        where = f" where {probe.replace(':', '.')}()"
        assert where in row["precisions"], (mode, row["precisions"])
        group = row["precisions"].split(where)[0].rsplit("; ", 1)[-1]
        assert mode in group.split(", "), (mode, row["precisions"])
    hints = [accelerator.get("install")] + [
        r["install"] if isinstance(r, dict) else r for r in accelerator.get("requires", [])
    ]
    for hint in filter(None, hints):
        assert hint in row["install"], hint
    own = accelerator.get("deepspeed_accelerator", accelerator.get("device_type"))
    generated = accelerator.get("deepspeed_generated", own not in deepspeeds_own_accelerators())
    if generated and accelerator.get("device_type") != "cpu":
        name = accelerator["class_name"].removesuffix("Accelerator")
        assert row["DeepSpeed"] == f"generated ({name}DeepSpeedAccelerator)", row
    else:
        assert row["DeepSpeed"] == f"DeepSpeed's own ({own})", row
    ray = row["Ray Train"]
    if not any("ray" in _cluster(name, strategies) for name in expected):
        assert ray == "no", row
    elif "ray_resource" in accelerator:
        assert ray.startswith(f"{accelerator['ray_resource']} per worker; backend "), row
    elif accelerator.get("device_type") == "cpu":
        assert ray == "CPU per worker; backend gloo", row
    else:
        assert ray.startswith("no Ray resource in its spec (ray_resource)"), row


def test_the_new_devices_have_lightning_plugins_and_lightnings_own_keep_theirs() -> None:
    rows = list_rows()
    for device in ("xpu", "npu", "mlu", "musa", "rocm", "generic", "hpu"):
        for framework in ("Lightning Trainer", "Lightning Fabric"):
            assert rows[device][framework].startswith("plugins: "), (device, rows[device])
            assert f"{device}_single" in rows[device][framework]
        assert page_rows()[device]["Lightning"] == "plugins"
    for device in ("cpu", "cuda", "mps"):
        assert rows[device]["Lightning Trainer"].startswith("Lightning's own"), rows[device]
        assert page_rows()[device]["Lightning"].startswith("Lightning's own")
    assert rows["ipu"]["Lightning Trainer"] == "no"  # Lightning 2 has no IPU strategy
    assert page_rows()["ipu"]["Lightning"] == "no"
    assert "xpu_ddp" in rows["xpu"]["Lightning Trainer"]


def test_ray_trains_the_devices_ray_schedules_with_their_own_backends() -> None:
    rows = page_rows()
    assert rows["npu"]["Ray Train"] == "NPU per worker; backend hccl"
    assert rows["cuda"]["Ray Train"] == "GPU per worker; backend nccl"
    assert rows["cpu"]["Ray Train"] == "CPU per worker; backend gloo"
    assert rows["mps"]["Ray Train"] == "no"  # one device, no parallel strategy


def test_a_project_without_the_lightning_target_says_so(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.stratgen]\npackage = "mylib"\n', encoding="utf-8"
    )
    result = run_cli("list", "--no-probe", "--project", tmp_path)
    assert result.code == 0, result.err
    assert "Lightning Trainer: not a target of this project" in result.out
