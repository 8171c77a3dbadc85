"""Build the wheels the GPU check carries to a machine without DeepSpeed.

    python -m benchmarks.gpu.wheels [--out .whl]

DeepSpeed is a source distribution: ``pip wheel --no-deps`` builds it here into a pure-Python
wheel (its ops compile on the machine when first used; ZeRO-2 with a torch optimizer needs
none). The packages it requires that the GPU machine lacks are downloaded as wheels for
CPython 3.12 on x86-64 Linux (``CARRIED``). The folder is emptied first, so that it holds one
version of each; then every requirement of every wheel is checked to be carried or on the
machine (``ON_THE_MACHINE``), and the sizes are printed: the folder travels with the working
tree, which may hold 64 MiB in all.

``python -m benchmarks.gpu`` installs the wheels of ``.whl`` (``pip install --no-index
--no-deps --target``) when it finds them and DeepSpeed is missing.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEEPSPEED = "deepspeed==0.19.8"
#: What DeepSpeed 0.19.8 requires that the GPU machine lacks (its Requires-Dist: hjson and
#: pydantic>=2), and what pydantic requires in turn (its pins: pydantic-core exactly;
#: typing-extensions>=4.14.1, carried because the machine's version is not known here).
CARRIED = (
    "hjson==3.1.0",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "typing-extensions==4.16.0",
)
#: Packages the carried wheels require that the GPU machine has (its image's package list).
ON_THE_MACHINE = (
    "einops",
    "msgpack",
    "ninja",
    "numpy",
    "packaging",
    "psutil",
    "py-cpuinfo",
    "torch",
    "tqdm",
)
#: The machine: CPython 3.12 on x86-64 Linux (manylinux tags pip matches exactly).
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)
MARKER_ENVIRONMENT = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "os_name": "posix",
    "extra": "",
}
LIMIT_MIB = 64


def pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", *args]
    print("$ " + " ".join(command[2:]), flush=True)
    subprocess.run(command, check=True)


def build(out: Path) -> list[Path]:
    for old in out.glob("*.whl"):
        old.unlink()
    out.mkdir(parents=True, exist_ok=True)
    pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), DEEPSPEED)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    pip(
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        *("--python-version", "3.12", "--implementation", "cp", *platforms),
        *("--dest", str(out), *CARRIED),
    )
    return sorted(out.glob("*.whl"))


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(wheel: Path) -> list[str]:
    """The Requires-Dist lines of ``wheel`` that apply on the machine (no extras)."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(name).decode("utf-8")
    found = []
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        requirement = Requirement(line.removeprefix("Requires-Dist:").strip())
        if requirement.marker is None or requirement.marker.evaluate(MARKER_ENVIRONMENT):
            found.append(str(requirement))
    return found


def missing(wheels: Sequence[Path]) -> list[str]:
    """Requirements of the wheels that are neither carried (in a matching version) nor on the
    machine."""
    from packaging.requirements import Requirement

    carried = {normalized(w.name.split("-")[0]): w.name.split("-")[1] for w in wheels}
    problems = []
    for wheel in wheels:
        for text in requirements(wheel):
            requirement = Requirement(text)
            name = normalized(requirement.name)
            if name in carried:
                if not requirement.specifier.contains(carried[name], prereleases=True):
                    problems.append(f"{wheel.name} needs {text}; {carried[name]} is carried")
            elif name not in {normalized(n) for n in ON_THE_MACHINE}:
                problems.append(f"{wheel.name} needs {text}, which is neither carried nor there")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu.wheels", description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / ".whl")
    args = parser.parse_args(argv)
    wheels = build(args.out)
    total = 0
    for wheel in wheels:
        size = wheel.stat().st_size
        total += size
        print(f"{size / 2**20:8.2f} MiB  {wheel.name}")
    print(f"{total / 2**20:8.2f} MiB  in all, in {args.out}")
    problems = missing(wheels)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if total > LIMIT_MIB * 2**20:
        print(f"error: more than the {LIMIT_MIB} MiB a working tree may carry", file=sys.stderr)
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
