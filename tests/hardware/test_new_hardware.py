"""Adding hardware is writing a spec.

A user project of its own (its own pyproject.toml and package name) gets a made-up device,
'acme', backed by the CPU and gloo, with a single-device strategy and a parallel one that
extends the built-in 'ddp' spec. ``stratgen new --from`` adds the spec file from outside the
project; the generated package then trains on two processes exactly like one process on the
whole batch, and the project's generated tests for the spec pass. No template changes: the
repository's templates tree (generator/stratgen/templates) is byte-for-byte the same before and after.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from stratcore.testing import (
    assert_parameters_close,
    clean_environ,
    reference_parameters,
    watch,
)

from .support import REPO

ACME_SPEC = """\
# Acme's (imaginary) training device: one process per device, on the CPU, talking over gloo.
version: 1

accelerator:
  name: acme
  class_name: AcmeAccelerator
  description: Acme's training device; each device is a CPU process.
  device_type: cpu
  indexed: false
  backend: gloo
  precision: {default: 32-true, supported: [32-true, bf16-mixed]}

strategies:
  - name: acme_single
    class_name: SingleAcmeStrategy
    base: single_device
    description: Strategy for training on one Acme device.
    accelerators: [acme]

  - name: acme_parallel
    class_name: AcmeParallelStrategy
    extends: ddp
    description: DistributedDataParallel over Acme devices, one process per device.
    accelerators: [acme]
    aliases:
      acme_ddp: {}
"""

PYPROJECT = """\
[project]
name = "acme-strategies"
version = "0.1.0"

[tool.stratgen]
package = "acmelib"
"""

CHECK = """
import json

import acmelib
import acmelib.registry
from stratcore import testing

process, result = testing.run_scenario("train", "acme_ddp", accelerator="acme", devices=2, steps=3)
print("RESULT " + json.dumps({
    "package": acmelib.__name__,
    "classes": [acmelib.AcmeAccelerator.__name__, acmelib.SingleAcmeStrategy.__name__, acmelib.AcmeParallelStrategy.__name__],
    "bases": [base.__name__ for base in acmelib.AcmeParallelStrategy.__mro__[1:3]],
    "registry": sorted(name for name in acmelib.registry.REGISTRY.strategies if name.startswith("acme")),
    "returncode": process.returncode,
    "stderr": process.stderr[-2000:],
    "world_size": result and result["world_size"],
    "params": result and result["params"],
}))
"""


def tree_digest(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return watch.run(command, cwd=cwd, env=env)


@pytest.mark.slow
def test_new_accelerator_and_strategies_from_a_spec_alone(tmp_path: Path) -> None:
    templates_before = tree_digest(REPO / "generator" / "stratgen" / "templates")
    project = tmp_path / "acme-project"
    (project / "specs").mkdir(parents=True)
    (project / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    spec = tmp_path / "drafts" / "acme.yaml"  # outside the project
    spec.parent.mkdir()
    spec.write_text(ACME_SPEC, encoding="utf-8")

    environ = clean_environ({"PYTHONPATH": str(REPO / "generator"), "NO_COLOR": "1"})
    new = run(
        [sys.executable, "-m", "stratgen", "new", "--from", str(spec)], cwd=project, env=environ
    )
    assert new.returncode == 0, new.stdout + new.stderr
    assert "added   specs/acme.yaml" in new.stdout
    assert (project / "specs" / "acme.yaml").read_text(encoding="utf-8") == ACME_SPEC
    package = project / "generated" / "acmelib"
    for module in (
        "accelerators/acme.py",
        "strategies/acme_single.py",
        "strategies/acme_parallel.py",
    ):
        assert (package / module).is_file(), module
    assert (project / "generated" / "tests" / "test_acme.py").is_file()
    check = run([sys.executable, "-m", "stratgen", "check"], cwd=project, env=environ)
    assert check.returncode == 0, check.stdout + check.stderr

    # A fresh process imports the user's package and trains on two ranks.
    script = tmp_path / "check_acme.py"
    script.write_text(textwrap.dedent(CHECK), encoding="utf-8")
    fresh = clean_environ({"PYTHONPATH": str(project / "generated")})
    process = run([sys.executable, str(script)], cwd=tmp_path, env=fresh)
    assert process.returncode == 0, process.stdout + process.stderr
    line = next(line for line in process.stdout.splitlines() if line.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    assert result["package"] == "acmelib"
    assert result["classes"] == ["AcmeAccelerator", "SingleAcmeStrategy", "AcmeParallelStrategy"]
    assert result["bases"] == ["DDPStrategy", "DDPStrategyBase"]
    assert result["registry"] == ["acme_ddp", "acme_parallel", "acme_single"]
    assert result["returncode"] == 0, result["stderr"]
    assert result["world_size"] == 2
    assert_parameters_close(result["params"], reference_parameters(steps=3))

    # The project's own generated tests for the new spec.
    run_pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    tests = run(
        [*run_pytest, "-n", "2", "generated/tests/test_acme.py"],
        cwd=project,
        env=clean_environ({"PYTHONPATH": str(project / "generated")}),
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert " passed" in tests.stdout and "failed" not in tests.stdout

    assert tree_digest(REPO / "generator" / "stratgen" / "templates") == templates_before
