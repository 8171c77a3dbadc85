"""Dependencies: every range admits torch 2.13.0 (the CPU build installed first), and the
optional backends install as extras."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
TORCH = "2.13.0"
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def requirements() -> list[tuple[str, Requirement]]:
    found = [("dependencies", Requirement(r)) for r in PROJECT["dependencies"]]
    for extra, items in PROJECT["optional-dependencies"].items():
        found += [(extra, Requirement(r)) for r in items]
    return found


def test_the_extras_users_install_exist() -> None:
    assert {"dev", "examples", "deepspeed", "fairscale", "torch"} <= set(
        PROJECT["optional-dependencies"]
    )


def test_torch_ranges_admit_the_cpu_build() -> None:
    torch_ranges = [(where, r) for where, r in requirements() if r.name == "torch"]
    assert torch_ranges
    for where, requirement in torch_ranges:
        assert requirement.specifier.contains(
            TORCH
        ), f"{where}: {requirement} excludes torch {TORCH}"


@pytest.mark.parametrize("backend", ["deepspeed", "fairscale"])
def test_backend_extras_fit_torch(backend: str) -> None:
    (requirement,) = [Requirement(r) for r in PROJECT["optional-dependencies"][backend]]
    assert requirement.name == backend
    try:
        installed = importlib.metadata.version(backend)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{backend} is not installed (pip install -e '.[{backend}]')")
    assert requirement.specifier.contains(
        installed
    ), f"{requirement} excludes the installed {installed}"
    # What the backend itself asks of torch must admit the CPU build, or pip would replace it.
    for text in importlib.metadata.requires(backend) or []:
        theirs = Requirement(text)
        if theirs.name == "torch" and theirs.marker is None:
            assert theirs.specifier.contains(TORCH), f"{backend} needs {theirs}"
