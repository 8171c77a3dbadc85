"""Each engine's knowledge stays in its own folder: no other module of the runtime imports
DeepSpeed, fairscale, Horovod, torch_xla or Lightning, or names one of their modules; in the
generator, only the Lightning and DeepSpeed targets (and the resolve stage's choice of a
device's DeepSpeed accelerator, which several targets read) name Lightning's or DeepSpeed's.

What counts as naming an engine: an import of its package, a call that imports or looks up a
module of it by name (``import_module``, ``import_object``, ``import_optional``,
``sys.modules.get``, ``Requirement``), and a string that is a dotted path into it
(``"deepspeed.comm.comm"``). A bare name such as ``"deepspeed"`` is a word of the spec
language (a wrapper's name, the contract's vocabulary), not a symbol of the engine.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "runtime" / "stratcore"
GENERATOR = REPO / "generator" / "stratgen"

#: Engine -> its top-level packages.
ENGINES: dict[str, tuple[str, ...]] = {
    "DeepSpeed": ("deepspeed",),
    "fairscale": ("fairscale",),
    "Horovod": ("horovod",),
    "XLA": ("torch_xla",),
    "Lightning": ("lightning", "lightning_fabric", "pytorch_lightning"),
}
#: Engine -> the paths of the runtime (folders or modules) that may name it.
RUNTIME_FOLDERS: dict[str, tuple[str, ...]] = {
    "DeepSpeed": ("wrappers/deepspeed/",),
    "fairscale": ("wrappers/fairscale/",),
    "Horovod": ("wrappers/horovod.py", "launchers/horovodrun.py"),
    "XLA": ("wrappers/xla.py", "launchers/xla.py"),
    "Lightning": ("lightning/", "testing/lightning/"),
}
#: Engine -> the paths of the generator that may name it: the targets that render code for it.
GENERATOR_FOLDERS: dict[str, tuple[str, ...]] = {
    "DeepSpeed": ("targets/deepspeed/", "resolve/deepspeed_accelerators.py"),
    "Lightning": ("targets/lightning/",),
}
#: Calls whose first argument names a module to import or look up.
IMPORTING_CALLS = {"import_module", "import_object", "import_optional", "get", "Requirement"}


def _named_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module path) of every engine-candidate module the code imports or names."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if (
                name in IMPORTING_CALLS
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                found.append((node.lineno, first.value.split(":")[0]))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", node.value)
        ):
            found.append((node.lineno, node.value))
    return sorted(set(found))


def _engine_of(module: str) -> str | None:
    top = module.split(".")[0]
    return next((engine for engine, tops in ENGINES.items() if top in tops), None)


def violations(root: Path, folders: dict[str, tuple[str, ...]]) -> list[str]:
    """Where a module under ``root`` names an engine outside the ``folders`` of that engine."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        for line, module in _named_modules(ast.parse(path.read_text(encoding="utf-8"))):
            engine = _engine_of(module)
            if engine is None:
                continue
            allowed = folders.get(engine, ())
            if not any(
                relative == a or (a.endswith("/") and relative.startswith(a)) for a in allowed
            ):
                problems.append(f"{relative}:{line}: names {engine}'s {module!r}")
    return problems


def test_no_runtime_module_names_an_engine_outside_its_folder() -> None:
    assert violations(RUNTIME, RUNTIME_FOLDERS) == []


def test_no_generator_module_names_an_engine_outside_its_target() -> None:
    assert violations(GENERATOR, GENERATOR_FOLDERS) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import deepspeed\n", ["names DeepSpeed's 'deepspeed'"]),
        ("from lightning.pytorch import Trainer\n", ["names Lightning's 'lightning.pytorch'"]),
        ("m = sys.modules.get('fairscale.internal.parallel')\n", ["names fairscale's"]),
        ("importlib.import_module('horovod')\n", ["names Horovod's 'horovod'"]),
        ("NAME = 'torch_xla.core.xla_model'\n", ["names XLA's"]),
        ("WRAPPER = 'deepspeed'\n", []),
        ("import torch.distributed\n", []),
    ],
)
def test_the_check_sees_what_names_an_engine(
    tmp_path: Path, source: str, expected: list[str]
) -> None:
    (tmp_path / "parts.py").write_text(source, encoding="utf-8")
    found = violations(tmp_path, RUNTIME_FOLDERS)
    assert len(found) == len(expected)
    for problem, text in zip(found, expected, strict=True):
        assert text in problem


def test_a_target_may_name_its_engine_and_nothing_else_may(tmp_path: Path) -> None:
    source = "BASE = 'lightning.pytorch.strategies.DDPStrategy'\n"
    for folder in ("targets/lightning", "targets/docs", "resolve"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "names.py").write_text(source, encoding="utf-8")
    found = violations(tmp_path, GENERATOR_FOLDERS)
    assert [problem.split(":")[0] for problem in found] == [
        "resolve/names.py",
        "targets/docs/names.py",
    ]
