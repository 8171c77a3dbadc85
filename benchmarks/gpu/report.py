"""The report of ``python -m benchmarks.gpu``: what ran where, and each check's outcome, as
Markdown for people and JSON for programs."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MARKDOWN = "gpu-check.md"
JSON = "gpu-check.json"


@dataclass
class Outcome:
    """One check's row: 'pass', 'fail', 'skip' (cannot run here) or 'left out' (no time)."""

    name: str
    status: str
    figure: str
    covers: str
    seconds: float | None = None
    expected_seconds: float | None = None
    conditions: list[dict[str, Any]] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    @property
    def failed(self) -> bool:
        return self.status == "fail"


def commit(root: Path, given: str | None) -> str:
    """The commit the checked tree is at: ``given`` (``--commit``), else git's answer, else
    what ``.git`` says without git; 'unknown' where none can tell (a tree copied without its
    ``.git``)."""
    if given:
        return given
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True
        )
        if head.returncode == 0 and head.stdout.strip():
            status = subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                capture_output=True,
                text=True,
            )
            changed = " with local changes" if status.stdout.strip() else ""
            return head.stdout.strip() + changed
    except OSError:
        pass
    return read_git_head(root / ".git") or "unknown (no git and no .git here: pass --commit)"


def read_git_head(dot_git: Path) -> str | None:
    """The commit HEAD names, read from the files of a git folder (or the ``gitdir:`` file of a
    worktree), loose refs and ``packed-refs`` included; None where they cannot tell."""
    try:
        if dot_git.is_file():
            text = dot_git.read_text(encoding="utf-8").strip()
            if not text.startswith("gitdir:"):
                return None
            dot_git = (dot_git.parent / text.removeprefix("gitdir:").strip()).resolve()
        head = (dot_git / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref:"):
            return head or None
        ref = head.removeprefix("ref:").strip()
        common = dot_git
        if (dot_git / "commondir").is_file():
            common = (
                dot_git / (dot_git / "commondir").read_text(encoding="utf-8").strip()
            ).resolve()
        for folder in (dot_git, common):
            loose = folder / ref
            if loose.is_file():
                return loose.read_text(encoding="utf-8").strip()
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="utf-8").splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    except OSError:
        return None
    return None


def machine_lines(machine: Mapping[str, Any]) -> list[str]:
    return [f"- {key}: {value}" for key, value in machine.items()]


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(
    outcomes: Sequence[Outcome], machine: Mapping[str, Any], summary: Mapping[str, Any]
) -> str:
    lines = [
        f"# GPU check on {machine.get('device name', machine.get('device', '?'))}",
        "",
        f"{summary['verdict']}",
        "",
        "| check | result | figure | seconds (expected on one H100) | covers |",
        "|---|---|---|---|---|",
    ]
    for outcome in outcomes:
        seconds = "-" if outcome.seconds is None else f"{outcome.seconds:.1f}"
        expected = "" if outcome.expected_seconds is None else f" ({outcome.expected_seconds:g})"
        lines.append(
            f"| {_cell(outcome.name)} | {outcome.status.upper() if outcome.failed else outcome.status}"
            f" | {_cell(outcome.figure)} | {seconds}{expected} | {_cell(outcome.covers)} |"
        )
    lines += ["", "## Where it ran", "", *machine_lines(machine), ""]
    failed = [o for o in outcomes if o.failed]
    if failed:
        lines += ["## Failures", ""]
        for outcome in failed:
            lines += [f"### {outcome.name}", ""]
            for condition in outcome.conditions:
                if not condition["ok"]:
                    lines.append(f"- not met: {condition['what']} (found: {condition['found']})")
            if outcome.error:
                lines += ["", "```text", outcome.error.rstrip(), "```"]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def write(
    folder: Path,
    outcomes: Sequence[Outcome],
    machine: Mapping[str, Any],
    summary: Mapping[str, Any],
) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    md, js = folder / MARKDOWN, folder / JSON
    md.write_text(markdown(outcomes, machine, summary), encoding="utf-8")
    document = {
        "machine": dict(machine),
        "summary": dict(summary),
        "checks": [vars(outcome) for outcome in outcomes],
    }
    js.write_text(json.dumps(document, indent=2, default=str), encoding="utf-8")
    return md, js
