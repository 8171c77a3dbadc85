"""The deepspeed target: a DeepSpeed accelerator for each device of a project's specs.

A project's device spec (written here, read back as plain YAML where a test needs its facts)
gets a class in ``<package>.deepspeed`` naming its accelerator, ``stratgen check`` reports a
changed one, importing the package imports nothing of DeepSpeed, a package without the target
makes the same class at run time, and the generator's list of DeepSpeed's accelerators is the
installed DeepSpeed's.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

from tests.support.generator import make_project, run_cli, run_python_in

DEVICE = """\
version: 1
backends:
  - name: zccl
    description: The made-up device's collective library.
    reduce_ops: [sum, min, max]
accelerator:
  name: zeta
  class_name: ZetaAccelerator
  description: A made-up device.
  device_type: zeta
  backend: zccl
  visible_devices_env: ZETA_VISIBLE_DEVICES
strategies:
  - name: zeta_deepspeed
    class_name: ZetaDeepSpeedStrategy
    extends: deepspeed
    description: DeepSpeed on the made-up device.
    accelerators: [zeta]
"""


def _project(root: Path, targets: str) -> Path:
    return make_project(
        root, {"zeta.yaml": DEVICE}, base=False, builtin=True, config=f"targets = {targets}\n"
    )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = _project(tmp_path_factory.mktemp("zeta") / "project", '["stratlib", "deepspeed"]')
    result = run_cli("generate", "--project", root)
    assert result.code == 0, result.err
    return root


def test_each_device_gets_a_deepspeed_accelerator_naming_its_accelerator(project: Path) -> None:
    folder = project / "out" / "minilib" / "deepspeed"
    tree = ast.parse((folder / "zeta.py").read_text(encoding="utf-8"))
    (cls,) = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    assert cls.name == "ZetaDeepSpeedAccelerator"
    assert [ast.unparse(b) for b in cls.bases] == ["DeepSpeedAcceleratorBase"]
    assigned = [n for n in cls.body if isinstance(n, ast.Assign)]
    assert [ast.unparse(n) for n in assigned] == ["spec = accelerators.ZetaAccelerator"]
    init = (folder / "__init__.py").read_text(encoding="utf-8")
    assert "from .zeta import ZetaDeepSpeedAccelerator" in init
    # The built-in CPU accelerator's devices are CPU processes: DeepSpeed's own class serves them.
    assert not (folder / "cpu.py").exists()


def test_the_device_trains_deepspeed_on_the_generated_class(project: Path) -> None:
    """DeepSpeed has no 'zeta' class: the accelerator says so, and importing the package and
    its DeepSpeed accelerators imports nothing of DeepSpeed."""
    done = run_python_in(
        project / "out",
        "import sys\n"
        "import minilib.deepspeed as ds\n"
        "from minilib import ZetaAccelerator\n"
        "assert ZetaAccelerator.deepspeed_generated\n"
        "assert ds.ZetaDeepSpeedAccelerator.spec is ZetaAccelerator\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] == 'deepspeed']\n"
        "assert not loaded, loaded\n",
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_check_reports_a_changed_deepspeed_module(project: Path) -> None:
    path = project / "out" / "minilib" / "deepspeed" / "zeta.py"
    original = path.read_text(encoding="utf-8")
    try:
        path.write_text(original.replace("spec = ", "spec  =  "), encoding="utf-8")
        result = run_cli("check", "--project", project)
        assert result.code == 1
        assert "minilib/deepspeed/zeta.py" in result.out + result.err
    finally:
        path.write_text(original, encoding="utf-8")
    assert run_cli("check", "--project", project).code == 0


def test_without_the_target_the_strategy_makes_the_same_class(tmp_path: Path) -> None:
    root = _project(tmp_path / "project", '["stratlib"]')
    result = run_cli("generate", "--project", root)
    assert result.code == 0, result.err
    assert not (root / "out" / "minilib" / "deepspeed").exists()
    done = run_python_in(
        root / "out",
        "import sys\n"
        "from stratcore.wrappers.deepspeed.accelerator.base import DeepSpeedAcceleratorBase\n"
        "from stratcore.wrappers.deepspeed.select import generated_class\n"
        "from minilib import ZetaAccelerator, ZetaDeepSpeedStrategy\n"
        "made = generated_class(ZetaAccelerator)\n"
        "assert issubclass(made, DeepSpeedAcceleratorBase), made.__mro__\n"
        "assert made.spec is ZetaAccelerator and made.__name__ == 'ZetaDeepSpeedAccelerator'\n"
        "assert generated_class(ZetaAccelerator) is made\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'deepspeed']\n",
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_generators_deepspeed_accelerators_are_the_installed_deepspeeds() -> None:
    from stratgen.resolve.deepspeed_accelerators import DEEPSPEED_ACCELERATORS

    spec = importlib.util.find_spec("deepspeed")
    if spec is None or spec.origin is None:
        pytest.skip("DeepSpeed is not installed")
    source = Path(spec.origin).with_name("accelerator") / "real_accelerator.py"
    match = re.search(r"^SUPPORTED_ACCELERATOR_LIST = (\[.*?\])", source.read_text(), re.M)
    assert match, source
    assert list(DEEPSPEED_ACCELERATORS) == ast.literal_eval(match.group(1))
