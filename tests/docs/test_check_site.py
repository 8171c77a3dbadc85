"""The check of the built site (scripts/check_site.py, run by .ci/test after the strict build):
it fails on a raw Sphinx role a reader would see, and on a device page without its product in
its title or without its verification status; quoted roles in code are no fault."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]

GOOD_DEVICE = """<html><head><title>MUSA: Moore Threads GPUs - stratgen</title></head><body>
<h1 id="musa-moore-threads-gpus">MUSA: Moore Threads GPUs<a class="headerlink">¶</a></h1>
<h2 id="verification-status">Verification status</h2></body></html>"""


def _check_site() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_site", ROOT / "scripts" / "check_site.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _site(tmp_path: Path, pages: dict[str, str]) -> Path:
    site = tmp_path / "site"
    pages = {"index.html": "<h1>Home</h1>", "devices/index.html": "<h1>Devices</h1>", **pages}
    for name, text in pages.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text, encoding="utf-8")
    return site


def test_a_sound_site_passes(tmp_path: Path) -> None:
    check = _check_site()
    quoted = "<p>Write <code>:class:`Name`</code> as <code>[Name][module.Name]</code>.</p>"
    site = _site(tmp_path, {"devices/musa/index.html": GOOD_DEVICE, "guide/index.html": quoted})
    assert check.check(site) == []
    assert check.main([str(site)]) == 0


def test_a_raw_role_is_found_with_its_page_and_context(tmp_path: Path) -> None:
    check = _check_site()
    page = "<p>Builds one :class:<code>Registry</code> of its strategies.</p>"
    site = _site(tmp_path, {"api/index.html": page, "devices/musa/index.html": GOOD_DEVICE})
    problems = check.check(site)
    assert len(problems) == 1 and problems[0].startswith("api/index.html: a raw role:")
    assert "Builds one :class:" in problems[0]
    assert check.main([str(site)]) == 1


def test_a_device_page_titled_with_its_name_or_without_a_status_fails(tmp_path: Path) -> None:
    check = _check_site()
    name_only = GOOD_DEVICE.replace("MUSA: Moore Threads GPUs<a", "musa<a")
    no_status = GOOD_DEVICE.replace('id="verification-status"', 'id="install"')
    site = _site(
        tmp_path,
        {"devices/musa/index.html": name_only, "devices/npu/index.html": no_status},
    )
    problems = check.check(site)
    assert any(p.startswith("devices/musa/index.html: titled 'musa'") for p in problems)
    assert any(p.startswith("devices/npu/index.html: no verification status") for p in problems)
    assert len(problems) == 2, problems


def test_a_folder_that_is_not_a_built_site_is_an_error(tmp_path: Path) -> None:
    assert _check_site().main([str(tmp_path)]) == 2
