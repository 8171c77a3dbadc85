"""A generated package refuses a runtime of another series at import, in one line."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import stratcore
from stratcore.testing import watch
from stratcore.version import RUNTIME_SERIES, RuntimeVersionError, check_runtime_version

from tests.support import REPO

GENERATED = REPO / "generated"


def test_same_series_passes_and_others_fail_naming_both_versions() -> None:
    check_runtime_version(RUNTIME_SERIES, "stratlib")
    major, minor = (int(part) for part in RUNTIME_SERIES.split("."))
    for other in (f"{major}.{minor + 1}", f"{major + 1}.0", f"{major}.{max(minor - 1, 0)}0"):
        with pytest.raises(RuntimeVersionError) as caught:
            check_runtime_version(other, "acme")
        message = str(caught.value)
        assert "\n" not in message
        assert f"acme was generated for stratcore {other}" in message
        assert f"stratcore {stratcore.__version__} is installed" in message
        assert f"pip install 'stratcore>={other}," in message


def test_importing_a_package_made_for_another_series_fails_before_anything_else(
    tmp_path: Path,
) -> None:
    package = tmp_path / "stratlib"
    shutil.copytree(GENERATED / "stratlib", package)
    init = package / "__init__.py"
    stamped = f'check_runtime_version("{RUNTIME_SERIES}", "stratlib")'
    text = init.read_text(encoding="utf-8")
    assert stamped in text
    init.write_text(text.replace(stamped, 'check_runtime_version("9.9", "stratlib")'))
    process = watch.run([sys.executable, "-c", "import stratlib"], what="import", cwd=tmp_path)
    assert process.returncode == 1
    last = process.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "stratcore.version.RuntimeVersionError: stratlib was generated for " "stratcore 9.9"
    )
    # The check runs before any other module of the package or of torch is imported.
    assert 'stratlib/__init__.py", line' in process.stderr
    assert "torch" not in process.stderr.replace("stratcore", "")
