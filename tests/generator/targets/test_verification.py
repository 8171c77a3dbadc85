"""The verification record: what each device's code has run on, shown on its page and in the
index from the one file the project names, held to the pages by `stratgen check`, and refused
with every mistake located when it is wrong."""

from __future__ import annotations

from pathlib import Path

from tests.support.generator import run_cli

SPEC = """\
version: 1

accelerator:
  name: widget
  class_name: WidgetAccelerator
  product: "WGT: Widget Corp's training cards"
  description: Accelerator for widgets.
  device_type: cpu
  indexed: false
  is_available: widget_sdk:is_available
  backend: gloo

strategies:
  - name: widget_ddp
    class_name: WidgetDDPStrategy
    extends: ddp
    description: DistributedDataParallel over widgets.
    accelerators: [widget]
"""

STAND_IN_ONLY = """\
version: 1
devices:
  widget:
    - on: stand-in
      what: widget_sdk imitated on the CPU
      when: every CI run
"""


def _project(tmp_path: Path, record: str) -> Path:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "widget.yaml").write_text(SPEC, encoding="utf-8")
    (tmp_path / "verification.yaml").write_text(record, encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.stratgen]\npackage = "widgetlib"\ntargets = ["stratlib", "docs"]\n'
        'verification = "verification.yaml"\n',
        encoding="utf-8",
    )
    return tmp_path


def _pages(project: Path) -> tuple[str, str]:
    devices = project / "docs" / "devices"
    return (
        (devices / "widget.md").read_text(encoding="utf-8"),
        (devices / "index.md").read_text(encoding="utf-8"),
    )


def test_a_device_without_a_hardware_report_says_so(tmp_path: Path) -> None:
    project = _project(tmp_path, STAND_IN_ONLY)
    result = run_cli("generate", "--project", project)
    assert result.code == 0, result.err
    page, index = _pages(project)
    assert page.startswith("# WGT: Widget Corp's training cards\n")
    assert "## Verification status" in page
    assert "| stand-ins on the CPU | widget\\_sdk imitated on the CPU | every CI run |" in page
    assert "| the hardware itself | no report yet |  |" in page
    assert '!!! warning "Not yet run on the hardware"' in page
    assert "No report from Widget Corp's training cards itself is recorded" in page
    assert "| [`widget`](widget.md) | Widget Corp's training cards |" in index
    assert index.rstrip().count("stand-ins; no hardware report") == 1


def test_a_report_from_the_hardware_is_shown_with_its_date_and_commit(tmp_path: Path) -> None:
    record = STAND_IN_ONLY + (
        "    - on: hardware\n"
        "      what: the GPU check, every check passed\n"
        "      date: 2026-05-04\n"
        "      commit: 3f2c1e0\n"
        "      report: reports/widget.md\n"
    )
    project = _project(tmp_path, record)
    (project / "reports").mkdir()
    (project / "reports" / "widget.md").write_text("# report\n", encoding="utf-8")
    assert run_cli("generate", "--project", project).code == 0
    page, index = _pages(project)
    assert (
        "| the hardware itself | the GPU check, every check passed "
        "| 2026-05-04, commit `3f2c1e0`: `reports/widget.md` |"
    ) in page
    assert "no report yet" not in page and "Not yet run on the hardware" not in page
    assert "stand-ins; hardware 2026-05-04" in index


def test_the_pages_follow_the_record_and_check_fails_until_they_do(tmp_path: Path) -> None:
    project = _project(tmp_path, STAND_IN_ONLY)
    assert run_cli("generate", "--project", project).code == 0
    record = project / "verification.yaml"
    record.write_text(STAND_IN_ONLY.replace("every CI run", "'opt-in: make widget'"), "utf-8")
    stale = run_cli("check", "--quiet", "--project", project)
    assert stale.code == 1, stale.out
    assert "changed: docs/devices/widget.md" in stale.out
    assert run_cli("generate", "--project", project).code == 0
    assert "| opt-in: make widget |" in _pages(project)[0]


def test_every_mistake_in_the_record_is_located_at_once(tmp_path: Path) -> None:
    record = """\
version: 1
devices:
  widget:
    - on: stand_in
      what: widget_sdk imitated on the CPU
      when: every CI run
    - on: hardware
      what: the GPU check
      when: yesterday
      date: 4 May
      report: reports/missing.md
    - on: engine
      what: the real SDK
      colour: blue
  gadget:
    - on: cpu
      what: nothing
      when: every CI run
"""
    project = _project(tmp_path, record)
    result = run_cli("generate", "--project", project)
    assert result.code == 2, result.out
    assert "Traceback" not in result.err
    for expected in (
        "verification.yaml:4:11: devices.widget[0].on: expected 'hardware', 'test-device', "
        "'engine', 'stand-in' or 'cpu', found 'stand_in' (did you mean 'stand-in'?)",
        "verification.yaml:9:7: devices.widget[1].when: a report from the hardware says 'date' "
        "and 'commit' instead",
        "verification.yaml:10:13: devices.widget[1].date: expected a date YYYY-MM-DD",
        "verification.yaml:7:7: devices.widget[1].commit: required for a report",
        "verification.yaml:11:15: devices.widget[1].report: no file 'reports/missing.md' in the "
        "project",
        "verification.yaml:14:7: devices.widget[2].colour: unknown key",
        "verification.yaml:12:7: devices.widget[2].when: say when it runs",
        "verification.yaml:15:3: devices.gadget: no accelerator named 'gadget' in the specs",
    ):
        assert expected in result.err, f"{expected}\n---\n{result.err}"
    assert not (project / "docs").exists(), "nothing is written when the record is wrong"


def test_a_device_the_record_says_nothing_of_is_refused(tmp_path: Path) -> None:
    project = _project(tmp_path, "version: 1\ndevices: {}\n")
    result = run_cli("generate", "--project", project)
    assert result.code == 2
    assert "verification.yaml: devices: no entry for device 'widget'" in result.err


def test_a_record_that_is_not_there_is_an_error(tmp_path: Path) -> None:
    project = _project(tmp_path, STAND_IN_ONLY)
    (project / "verification.yaml").unlink()
    result = run_cli("check", "--project", project)
    assert result.code == 2
    assert "verification.yaml: the verification record named in [tool.stratgen] is missing" in (
        result.err
    )
