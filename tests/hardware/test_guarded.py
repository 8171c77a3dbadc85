"""Hardware backends stay out of the way until used.

``import stratlib`` (and listing strategies, and importing the wrappers and hooks) imports
none of them; using one that is not installed raises MissingDependencyError with the package
and the install command its spec names under ``requires:``. (Horovod is installed here, built
by .ci/horovod: those tests hide it.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from stratcore.imports import module_available
from stratcore.testing import clean_environ, watch

import stratlib
from stratlib import registry

from .support import GENERATED, REPO

HARDWARE_SPECS = ("horovod", "bagua", "xla", "ipu", "hpu")
#: The backends' modules. Finding ``horovod.torch`` imports the ``horovod`` package, as finding
#: any submodule imports its parent; that package imports neither torch nor Horovod's library.
HEAVY = ("horovod.torch", "bagua", "torch_xla", "poptorch", "habana_frameworks")


@pytest.fixture
def without_backends(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The hardware packages made impossible to import, those installed here included."""
    for name in HEAVY:
        monkeypatch.setitem(sys.modules, name, None)
    module_available.cache_clear()
    yield
    module_available.cache_clear()


def spec(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "specs" / f"{name}.yaml").read_text(encoding="utf-8"))


def declared(kind: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, entry) of every strategy, accelerator or precision plugin of the hardware specs
    that needs a package: one its entry lists, or (for a strategy or plugin made for the spec's
    own accelerator alone) the accelerator's, which it needs without listing it."""
    found = []
    for name in HARDWARE_SPECS:
        content = spec(name)
        accelerator = content.get("accelerator", {})
        if kind == "accelerator":
            found += [(accelerator["name"], accelerator)] if accelerator else []
            continue
        for entry in content.get(kind, []):
            if not entry.get("requires") and entry.get("accelerators") == [accelerator.get("name")]:
                entry = {**entry, "requires": accelerator["requires"]}
            if entry.get("requires"):
                found.append((entry["name"], entry))
    return found


def test_importing_the_package_imports_no_backend(tmp_path: Path) -> None:
    code = f"""
import json, sys
import stratlib
stratlib.list_strategies()
import stratcore.wrappers.horovod, stratcore.wrappers.bagua, stratcore.wrappers.xla
import stratcore.wrappers.poptorch, stratlib.hooks.ipu
print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
"""
    environ = clean_environ({"PYTHONPATH": str(GENERATED)})
    process = watch.run([sys.executable, "-c", code], cwd=tmp_path, env=environ)
    assert process.returncode == 0, process.stderr
    assert json.loads(process.stdout) == []


@pytest.mark.usefixtures("without_backends")
def test_backends_are_listed_as_unavailable() -> None:
    infos = {info.name: info for info in stratlib.list_strategies()}
    for name in (
        "horovod",
        "bagua",
        "single_tpu",
        "tpu_spawn",
        "xla",
        "ipu",
        "hpu_single",
        "hpu_parallel",
    ):
        assert infos[name].available is False, name
    assert infos["tpu_spawn"].launcher == "xla"
    assert infos["horovod"].launcher == "horovodrun"
    assert infos["hpu_parallel"].backend == "hccl"


@pytest.mark.usefixtures("without_backends")
@pytest.mark.parametrize(
    ("name", "entry"), declared("strategies"), ids=lambda v: v if isinstance(v, str) else ""
)
def test_strategy_without_its_backend(name: str, entry: dict[str, Any]) -> None:
    requirement = entry["requires"][0]
    cls = registry.REGISTRY.strategies[name].cls
    with pytest.raises(stratlib.MissingDependencyError) as raised:
        cls()
    message = str(raised.value)
    assert f"'{requirement['module']}'" in message
    assert requirement["install"] in message
    assert message.startswith(f"{cls.__name__} needs")


@pytest.mark.usefixtures("without_backends")
@pytest.mark.parametrize(
    ("name", "entry"), declared("accelerator"), ids=lambda v: v if isinstance(v, str) else ""
)
def test_accelerator_without_its_software(name: str, entry: dict[str, Any]) -> None:
    requirement = entry["requires"][0]
    cls = registry.REGISTRY.accelerators[name]
    assert not cls.is_available()
    with pytest.raises(
        stratlib.MissingDependencyError, match=f"accelerator='{name}' needs"
    ) as raised:
        stratlib.get_strategy("auto", accelerator=name)
    assert requirement["install"] in str(raised.value)


@pytest.mark.usefixtures("without_backends")
@pytest.mark.parametrize(
    ("name", "entry"), declared("precision_plugins"), ids=lambda v: v if isinstance(v, str) else ""
)
def test_precision_plugin_without_its_backend(name: str, entry: dict[str, Any]) -> None:
    requirement = entry["requires"][0]
    plugin = next(p for p in registry.REGISTRY.precision_plugins if p.name == name)
    with pytest.raises(stratlib.MissingDependencyError) as raised:
        plugin(entry["modes"][0])
    assert f"'{requirement['module']}'" in str(raised.value)
    assert requirement["install"] in str(raised.value)


@pytest.mark.usefixtures("without_backends")
def test_backends_without_their_packages() -> None:
    from stratcore.imports import require

    for backend in ("horovod", "xla", "hccl"):
        declared_backend = registry.REGISTRY.backends[backend]
        with pytest.raises(stratlib.MissingDependencyError, match=f"backend {backend!r} needs"):
            require(declared_backend.requires, f"backend {backend!r}")
