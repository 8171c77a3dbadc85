"""Running scripts against stand-ins of hardware packages that cannot be installed here.

The stand-ins under ``standins/`` are small CPU-only packages with the names and the functions
of the real ones (habana_frameworks, horovod, torch_xla, poptorch, bagua, torch_npu, torch_mlu,
torch_musa); ``standin_torch`` stands in for the parts of torch's device builds. They record
every call in a JSON-lines file, so that a test can check what stratlib called and in which
order.
They are copied into a temporary folder and put on the PYTHONPATH of a fresh process only:
the test process itself never sees them. Each says at its top what it was written from, and
``test_standin_apis`` holds them to the real packages' APIs (docs/guides/stand-ins.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stratcore.testing import clean_environ, watch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STANDINS = HERE / "standins"
GENERATED = REPO / "generated"


@dataclass
class Run:
    """A finished script: its process, rank 0's RESULT and the stand-ins' call log."""

    process: subprocess.CompletedProcess[str]
    result: Any
    events: list[dict[str, Any]]

    def check(self) -> Run:
        assert self.process.returncode == 0, self.process.stdout + self.process.stderr
        return self

    def named(self, *names: str, pid: int | None = None) -> list[dict[str, Any]]:
        """Events with one of these names (of one process, if given), in order."""
        return [e for e in self.events if e["event"] in names and (pid is None or e["pid"] == pid)]

    def pids(self) -> list[int]:
        return sorted({e["pid"] for e in self.events})


def install_standins(folder: Path, packages: tuple[str, ...], devices: bool = False) -> Path:
    """A folder for the PYTHONPATH with the stand-in ``packages``; with ``devices``, also
    ``sitecustomize``, which places the accelerators named in STANDIN_ON_CPU on the CPU and
    stands in for the parts of torch named in STANDIN_TORCH."""
    site = folder / "standin-site"
    site.mkdir(parents=True, exist_ok=True)
    for helper in STANDINS.glob("standin_*.py"):  # what the stand-in packages share
        shutil.copy(helper, site)
    for package in packages:
        shutil.copytree(STANDINS / package, site / package, dirs_exist_ok=True)
    if devices:
        shutil.copy(STANDINS / "sitecustomize.py", site)
    return site


def run_script(
    folder: Path,
    source: str,
    *,
    standins: tuple[str, ...] = (),
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    devices: bool = False,
) -> Run:
    """Run ``source`` as ``folder/script.py`` with the stand-ins and the generated package
    (``devices``: with ``sitecustomize`` too, see ``install_standins``)."""
    folder.mkdir(parents=True, exist_ok=True)
    site = install_standins(folder, standins, devices)
    script = folder / "script.py"
    script.write_text(textwrap.dedent(source), encoding="utf-8")
    events = folder / "events.jsonl"
    environ = clean_environ(
        {**(env or {}), "PYTHONPATH": os.pathsep.join([str(site), str(GENERATED)])}
    )
    environ["STANDIN_EVENTS"] = str(events)
    process = watch.run([sys.executable, str(script), *args], cwd=folder, env=environ)
    result = None
    for line in process.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    logged = []
    if events.is_file():
        logged = [
            json.loads(line) for line in events.read_text(encoding="utf-8").splitlines() if line
        ]
    return Run(process, result, logged)
