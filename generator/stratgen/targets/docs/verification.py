"""The verification record: for each device, what its code has run on, and when.

A project names the record in ``[tool.stratgen]`` (``verification = "verification.yaml"``);
without it the device pages have no verification section. The docs target shows the record on
every device page (beside what only the hardware can prove) and in the devices index, so the
record is the one place that says it: edit it, run ``stratgen generate``, and ``stratgen check``
fails until the pages say the same.

    version: 1
    devices:
      musa:
        - on: stand-in
          what: torch_musa imitated on the CPU; the generated tests of specs/musa.yaml pass on it
          when: every CI run
        - on: hardware
          what: python -m benchmarks.gpu, 13 checks passed
          date: 2026-05-04
          commit: 3f2c1e0
          report: benchmarks/gpu/results/2026-05-04-musa.md

Each entry's ``on`` is one of ``KINDS``. An entry ``on: hardware`` is a report from the device
itself and must say when (``date``), of which tree (``commit``) and where the report is
(``report``, a file of the project); the others say ``when`` they run (``every CI run``, or the
command of an opt-in check). Every device with a page must have an entry; a mistake is
``file:line:column: path: message``, all of them at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from stratcore.wording import did_you_mean

from ...spec.errors import Location, SpecError, SpecProblem, one_of
from ...spec.yaml_loader import Node, load_yaml_file

VERSION = 1
#: Where a device's code ran, from the device's own hardware down to the CPU, as its page names
#: each kind.
KINDS = {
    "hardware": "the hardware itself",
    "test-device": "the project's test device",
    "engine": "the real engine on the CPU",
    "stand-in": "stand-ins on the CPU",
    "cpu": "CPU processes",
}
#: Short names of the kinds, for the devices index.
SHORT = {
    "hardware": "hardware",
    "test-device": "test device",
    "engine": "real engine",
    "stand-in": "stand-ins",
    "cpu": "CPU",
}
_ENTRY_KEYS = ("on", "what", "when", "date", "commit", "report")
_HARDWARE_KEYS = ("date", "commit", "report")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")


@dataclass(frozen=True)
class Entry:
    """One thing a device's code ran on."""

    on: str
    what: str
    when: str = ""
    date: str = ""
    commit: str = ""
    report: str = ""

    @property
    def label(self) -> str:
        return KINDS[self.on]


@dataclass(frozen=True)
class Record:
    """The record of a project: its file (as messages name it) and each device's entries."""

    path: str
    devices: dict[str, tuple[Entry, ...]]

    def of(self, device: str) -> tuple[Entry, ...]:
        return self.devices.get(device, ())

    def hardware(self, device: str) -> tuple[Entry, ...]:
        """The reports from the device itself, newest first."""
        found = [e for e in self.of(device) if e.on == "hardware"]
        return tuple(sorted(found, key=lambda e: e.date, reverse=True))

    def require(self, devices: Iterable[str], where: Location | None = None) -> None:
        """Every device named has an entry (a page without a verification status is refused)."""
        missing = [d for d in devices if not self.of(d)]
        if missing:
            raise SpecError(
                [
                    SpecProblem(
                        where or Location(self.path),
                        "devices",
                        f"no entry for device {name!r}: say what its code has run on "
                        f"(on: {one_of(KINDS)})",
                    )
                    for name in missing
                ]
            )


class _Reader:
    def __init__(self, file: str, root: Path) -> None:
        self.file = file
        self.root = root
        self.problems: list[SpecProblem] = []

    def fail(self, loc: Location, path: str, message: str) -> None:
        self.problems.append(SpecProblem(loc, path, message))

    def text(self, node: Node, key: str, path: str) -> str:
        value = node.value.get(key)
        if value is None:
            return ""
        if not isinstance(value.value, str) or not value.value.strip():
            self.fail(value.loc, f"{path}.{key}", "expected a non-empty string")
            return ""
        return " ".join(value.value.split())

    def entry(self, node: Node, path: str) -> Entry | None:
        if not node.is_map:
            self.fail(node.loc, path, "expected a mapping with 'on' and 'what'")
            return None
        for key in node.value:
            if key not in _ENTRY_KEYS:
                self.fail(
                    node.key_locs.get(key, node.loc),
                    f"{path}.{key}",
                    f"unknown key{did_you_mean(key, _ENTRY_KEYS)}; allowed: {one_of(_ENTRY_KEYS)}",
                )
        values = {key: self.text(node, key, path) for key in _ENTRY_KEYS}
        kind = values["on"]
        if kind not in KINDS:
            where = node.value["on"].loc if "on" in node.value else node.loc
            found = f"{kind!r}{did_you_mean(kind, KINDS)}" if kind else "nothing"
            self.fail(where, f"{path}.on", f"expected {one_of(KINDS)}, found {found}")
            return None
        if not values["what"]:
            self.fail(node.loc, f"{path}.what", "say what ran (required)")
        if kind == "hardware":
            self._hardware(node, path, values)
        else:
            if not values["when"]:
                self.fail(node.loc, f"{path}.when", "say when it runs, e.g. 'every CI run'")
            for key in _HARDWARE_KEYS:
                if key in node.value:
                    self.fail(
                        node.key_locs[key],
                        f"{path}.{key}",
                        f"only a report from the hardware ('on: hardware') has a {key}",
                    )
        return Entry(**values)

    def _hardware(self, node: Node, path: str, values: dict[str, str]) -> None:
        if "when" in node.value:
            self.fail(
                node.key_locs["when"],
                f"{path}.when",
                "a report from the hardware says 'date' and 'commit' instead",
            )
        for key, pattern, what in (
            ("date", _DATE, "a date YYYY-MM-DD"),
            ("commit", _COMMIT, "a commit hash in lower-case hex, 7 to 40 digits"),
        ):
            if not values[key]:
                self.fail(node.loc, f"{path}.{key}", f"required for a report: {what}")
            elif not pattern.fullmatch(values[key]):
                self.fail(node.value[key].loc, f"{path}.{key}", f"expected {what}")
        report = values["report"]
        if not report:
            self.fail(node.loc, f"{path}.report", "required for a report: the report's file")
        elif Path(report).is_absolute() or ".." in Path(report).parts:
            self.fail(
                node.value["report"].loc, f"{path}.report", "expected a path inside the project"
            )
        elif not (self.root / report).is_file():
            self.fail(
                node.value["report"].loc,
                f"{path}.report",
                f"no file {report!r} in the project: name the report as it is checked in",
            )


def load_record(path: Path, display: str, root: Path, devices: Iterable[str]) -> Record:
    """The record at ``path``, checked; ``devices`` are the project's accelerators (an entry
    for another name is a mistake)."""
    if not path.is_file():
        raise SpecError.single(
            Location(display), "", "the verification record named in [tool.stratgen] is missing"
        )
    tree = load_yaml_file(path, display)
    reader = _Reader(display, root)
    known = list(devices)
    found: dict[str, tuple[Entry, ...]] = {}
    if not tree.is_map:
        raise SpecError.single(tree.loc, "", "expected a mapping with 'version' and 'devices'")
    for key in tree.value:
        if key not in ("version", "devices"):
            reader.fail(
                tree.key_locs.get(key, tree.loc),
                key,
                f"unknown key; allowed: {one_of(('version', 'devices'))}",
            )
    version = tree.value.get("version")
    if version is None or version.value != VERSION:
        reader.fail(version.loc if version else tree.loc, "version", f"expected {VERSION}")
    entries = tree.value.get("devices")
    if entries is None or not entries.is_map:
        reader.fail(entries.loc if entries else tree.loc, "devices", "expected a mapping")
    else:
        for name, node in entries.value.items():
            path_ = f"devices.{name}"
            if name not in known:
                reader.fail(
                    entries.key_locs.get(name, node.loc),
                    path_,
                    f"no accelerator named {name!r} in the specs{did_you_mean(name, known)}",
                )
                continue
            if not node.is_seq or not node.value:
                reader.fail(node.loc, path_, "expected a list of entries")
                continue
            read = [reader.entry(item, f"{path_}[{i}]") for i, item in enumerate(node.value)]
            found[name] = tuple(e for e in read if e is not None)
    if reader.problems:
        raise SpecError(reader.problems)
    return Record(display, found)
