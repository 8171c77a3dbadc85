"""What a strategy or precision plugin needs: the modules its spec lists, then those of the
accelerators it is made for, so that a device spec names its package once (on the accelerator)
and its strategies still refuse to start without it."""

from __future__ import annotations

from pathlib import Path

from tests.support.generator import make_project, run_cli, run_python_in

ACME = """\
accelerator:
  name: acme
  class_name: AcmeAccelerator
  device_type: cpu
  indexed: false
  backend: gloo
  requires:
    - {module: acme_sdk_not_installed, install: pip install acme-sdk}

strategies:
  - name: acme_single
    class_name: SingleAcmeStrategy
    base: single_device
    accelerators: [acme]

  - name: acme_ddp
    class_name: AcmeDDPStrategy
    extends: ddp
    accelerators: [acme]
    requires:
      - {module: json, install: part of Python}
      - {module: acme_sdk_not_installed, install: pip install acme-sdk}

  - name: acme_or_cpu
    class_name: AcmeOrCPUStrategy
    base: single_device
    accelerators: [acme, cpu]

precision_plugins:
  - name: acme_precision
    class_name: AcmePrecisionPlugin
    extends: precision
    modes: [32-true]
    accelerators: [acme]
"""

PROBE = """\
from stratcore.exceptions import MissingDependencyError
from minilib import (
    AcmeDDPStrategy, AcmeOrCPUStrategy, AcmePrecisionPlugin, SingleAcmeStrategy,
)

def modules(cls):
    return [r.module for r in cls.requires]

# Listed by the spec first, then the accelerator's; a module the spec repeats counts once.
assert modules(AcmeDDPStrategy) == ["json", "acme_sdk_not_installed"], modules(AcmeDDPStrategy)
assert modules(SingleAcmeStrategy) == ["acme_sdk_not_installed"], modules(SingleAcmeStrategy)
assert modules(AcmePrecisionPlugin) == ["acme_sdk_not_installed"], modules(AcmePrecisionPlugin)
# The CPU needs nothing, so a strategy that may run there needs nothing either.
assert modules(AcmeOrCPUStrategy) == [], modules(AcmeOrCPUStrategy)
AcmeOrCPUStrategy()
for cls in (SingleAcmeStrategy, AcmeDDPStrategy, AcmePrecisionPlugin):
    try:
        cls()
    except MissingDependencyError as error:
        assert "pip install acme-sdk" in str(error), error
    else:
        raise AssertionError(f"{cls.__name__} started without acme_sdk_not_installed")
print("ok")
"""


def test_a_device_strategy_needs_its_accelerators_package_without_restating_it(
    tmp_path: Path,
) -> None:
    root = make_project(tmp_path / "p", {"acme.yaml": ACME}, base=False, builtin=True)
    result = run_cli("generate", "--project", root)
    assert result.code == 0, result.err
    done = run_python_in(root / "out", PROBE)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr
