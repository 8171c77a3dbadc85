"""The stand-ins (tests/hardware/standins) agree with the real packages they stand in for.

``standin_check`` says what is compared and how. Here: each stand-in whose vendor's package
can be downloaded against its source (``vendor_sources``), the stand-ins of torch's device
builds against the torch installed here, the rules of the comparison on small packages
written for them, and the provenance every stand-in states at its top.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from .apisource import Reference, SourceTree
from .standin_check import STANDINS, Check, check_package, failure_report, torch_parts
from .vendor_sources import PACKAGES, VendorSourceError, fetch


def vendor_tree(package: str) -> SourceTree:
    """The real package's source, downloaded the first time (a failed download fails the
    test with pip's reason)."""
    try:
        return SourceTree(fetch(PACKAGES[package]))
    except VendorSourceError as error:
        failure = str(error)
    pytest.fail(failure, pytrace=False)  # outside the handler: the one line, no traceback


# --- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_standin_agrees_with_the_real_package(package: str) -> None:
    findings = check_package(package, vendor_tree(package))
    assert not findings, failure_report(findings, PACKAGES[package].requirement)


def test_standins_of_torchs_device_builds_agree_with_the_installed_torch() -> None:
    import torch

    findings = check_package(None, None)
    assert not findings, failure_report(findings, f"torch {torch.__version__}")
    assert {attribute for _, attribute, _ in torch_parts()} >= {"set_device", "set_device_index"}


def test_a_horovod_standin_that_keeps_torchs_zero_grad_fails(tmp_path: Path) -> None:
    """Horovod's DistributedOptimizer overrides zero_grad() without torch's set_to_none: a
    stand-in that inherits torch's accepts calls Horovod refuses (the first optimizer step of
    every Horovod job failed so), and the check says so, naming both files."""
    optimizer = tmp_path / "horovod" / "torch" / "optimizer.py"
    optimizer.parent.mkdir(parents=True)
    (tmp_path / "horovod" / "__init__.py").write_text("", encoding="utf-8")
    (optimizer.parent / "__init__.py").write_text(
        "from .optimizer import DistributedOptimizer, _DistributedOptimizer\n", encoding="utf-8"
    )
    optimizer.write_text(
        "import torch\n\n\n"
        "class _DistributedOptimizer(torch.optim.Optimizer):\n"
        "    def step(self, closure=None): ...\n\n\n"
        "def DistributedOptimizer(optimizer, named_parameters=None): ...\n",
        encoding="utf-8",
    )
    findings = check_package("horovod", vendor_tree("horovod"), SourceTree(tmp_path))
    [zero_grad] = [f for f in findings if f.name.endswith("_DistributedOptimizer.zero_grad")]
    message = str(zero_grad)
    assert "takes 'set_to_none', which the real one does not" in message, message
    assert re.search(r"real: +\S+/horovod/torch/optimizer\.py:\d+ \(\)$", message, re.M), message
    inherited = r"stand-in: +\S+/horovod/torch/optimizer\.py:\d+ \(zero_grad from \S+/torch/optim/"
    assert re.search(inherited, message), message


#: (stand-in module, real module, what the check says; None: nothing). Each a call the
#: stand-in accepts that the real one would refuse or read otherwise, or a stand-in that is
#: only stricter.
RULES = {
    "a parameter the real one lacks": (
        "def f(x, y=1): ...",
        "def f(x): ...",
        "takes 'y', which the real one does not",
    ),
    "keyword-only where the real one is positional too": (
        "def f(x, *, y=None): ...",
        "def f(x, y=None, z=2): ...",
        None,
    ),
    "positions swapped": (
        "def f(b, a): ...",
        "def f(a, b): ...",
        "'b' is positional argument 1 here, 2",
    ),
    "another default": (
        "def f(op='sum'): ...",
        "def f(op='mean'): ...",
        "'op' defaults to 'sum' here, to 'mean'",
    ),
    "a default the real one lacks": (
        "def f(x=1): ...",
        "def f(x): ...",
        "the real one requires it",
    ),
    "a required parameter left out": ("def f(): ...", "def f(x): ...", "the real one requires 'x'"),
    "**kwargs the real one lacks": ("def f(**kwargs): ...", "def f(a=1): ...", "takes **kwargs"),
    "a value where the real one has a class": (
        "f = 'f'",
        "class f: ...",
        "a class in the real package",
    ),
    "re-exported through a star import and __all__": (
        "def f(x): ...",
        "from ._impl import *",
        None,
    ),
    "hidden by __all__": ("def g(x): ...", "from ._impl import *", "the real package has none"),
    "a method of a module-level instance": (
        "def h(x, y): ...",
        "class _Basics:\n    def h(self, x): ...\n_basics = _Basics()\nh = _basics.h",
        "takes 'y', which the real one does not",
    ),
    "a private class kept in a module the real one imports from": (
        "class _Hidden:\n    def m(self, x, y): ...",
        "from ._impl import f",
        "_Hidden.m: takes 'y', which the real one does not",
    ),
    "a method inherited from torch": (
        "import torch\nclass O(torch.optim.Optimizer): ...",
        "import torch\nclass O(torch.optim.Optimizer):\n    def zero_grad(self): ...",
        "takes 'set_to_none', which the real one does not",
    ),
    "a mixin's methods, from the base it lacks": (
        "class O: ...",
        "import torch\nclass O(torch.optim.Optimizer):\n    def zero_grad(self): ...",
        "O.zero_grad: takes 'set_to_none', which the real one does not",
    ),
    "a base from torch left out": (
        "class O: ...",
        "import torch\nclass O(torch.optim.Optimizer): ...",
        "derives from torch.optim.optimizer.Optimizer in the real package, not here",
    ),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_the_check_finds_calls_the_real_function_would_refuse(rule: str, tmp_path: Path) -> None:
    standin, real, expected = RULES[rule]
    for side, source in (("standin", standin), ("real", real)):
        (tmp_path / side / "pkg").mkdir(parents=True)
        (tmp_path / side / "pkg" / "__init__.py").write_text(source + "\n")
    (tmp_path / "real" / "pkg" / "_impl.py").write_text(
        "__all__ = ['f']\ndef f(x): ...\ndef g(x): ...\nclass _Hidden:\n    def m(self, x): ...\n"
    )
    real_tree = SourceTree(tmp_path / "real")

    def real_module(name: str) -> Reference | None:
        found = real_tree.module(name)
        return found.ref if found is not None else None

    check = Check(real_module, used=lambda scope, name: True)
    for module in SourceTree(tmp_path / "standin").modules("pkg"):
        check.module(module)
    found = "\n".join(map(str, check.findings))
    if expected is None:
        assert not found
    else:
        assert expected in found, found
        assert str(tmp_path / "standin" / "pkg" / "__init__.py") in found, found
        assert str(tmp_path / "real" / "pkg") in found, found


def test_every_standin_names_its_source() -> None:
    """Each stand-in says at its top what it was written from; those checked here name the
    release they are checked against."""
    tops = [p / "__init__.py" for p in sorted(STANDINS.iterdir()) if (p / "__init__.py").is_file()]
    for path in [*tops, STANDINS / "standin_torch.py"]:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        assert "Written from" in doc, f"{path}: its docstring names no source ('Written from ...')"
        vendor = PACKAGES.get(path.parent.name)
        if vendor is not None:
            assert f"{vendor.project} {vendor.version}" in doc, f"{path}: name {vendor.requirement}"
