"""The vendors' Python sources that the stand-ins are checked against, downloaded once.

Each package below is fetched from PyPI with ``pip download --no-deps`` (never installed or
imported), and the ``.py`` files of its packages are unpacked into
``$XDG_CACHE_HOME/stratgen/vendor-sources/<name>-<version>`` (``~/.cache`` without
XDG_CACHE_HOME), where every later run reads them. ``.ci/setup`` fetches them all
(``python tests/hardware/vendor_sources.py``); a test that finds one missing fetches it itself.
A download that fails raises ``VendorSourceError`` with one line that says what and why.

The standard library only: ``.ci/setup`` runs this file as a script.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath

#: The platform whose wheels are read: their Python sources are the same on every platform.
WHEEL_PLATFORM = (
    "--platform=manylinux_2_28_x86_64",
    "--python-version=3.11",
    "--implementation=cp",
    "--abi=cp311",
)


@dataclass(frozen=True)
class VendorPackage:
    """A vendor's package on PyPI whose stand-in (``tests/hardware/standins/<package>``) is
    checked against its source."""

    package: str  # the import name, and the stand-in's folder
    project: str  # the name on PyPI
    version: str
    wheel: bool  # a wheel; otherwise the source distribution
    why: str  # why this release

    @property
    def requirement(self) -> str:
        return f"{self.project}=={self.version}"

    @property
    def folder(self) -> Path:
        return cache_root() / f"{self.project}-{self.version}"


PACKAGES = {
    package.package: package
    for package in (
        VendorPackage("horovod", "horovod", "0.28.1", False, "the newest release"),
        VendorPackage("bagua", "bagua", "0.9.2", False, "the newest release"),
        VendorPackage(
            "torch_xla",
            "torch_xla",
            "2.9.0",
            True,
            "the newest release; specs/xla.yaml installs 2.9",
        ),
        VendorPackage(
            "torch_npu",
            "torch-npu",
            "2.13.0",
            True,
            "built for torch 2.13.0, the torch stratgen is tested with; specs/npu.yaml cites it",
        ),
    )
}


class VendorSourceError(RuntimeError):
    """A vendor's source could not be had; the message is one line."""


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "stratgen", "vendor-sources")


def fetch(vendor: VendorPackage) -> Path:
    """The folder holding ``vendor``'s Python sources, downloaded and unpacked first if it is
    not in the cache yet."""
    if vendor.folder.is_dir():
        return vendor.folder
    cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{vendor.project}-", dir=cache_root()) as scratch:
        download, tree = Path(scratch, "download"), Path(scratch, "tree")
        archive = _download(vendor, download)
        _unpack_sources(archive, vendor.package, tree)
        if not any(tree.glob(f"{vendor.package}/__init__.py")):
            raise VendorSourceError(f"{archive.name} holds no package {vendor.package!r}")
        (tree / "ARCHIVE").write_text(f"{archive.name} {archive.stat().st_size}\n")
        try:
            tree.rename(vendor.folder)  # atomic: a reader sees the whole folder or none
        except OSError:
            if not vendor.folder.is_dir():  # not a concurrent fetch that finished first
                raise
    return vendor.folder


def _download(vendor: VendorPackage, folder: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check"]
    command += ["--dest", str(folder), vendor.requirement]
    if vendor.wheel:
        command += ["--only-binary=:all:", *WHEEL_PLATFORM]
    else:
        command += [f"--no-binary={vendor.project}"]
    process = subprocess.run(command, capture_output=True, text=True, check=False)
    archives = sorted(folder.glob("*")) if folder.is_dir() else []
    if process.returncode != 0 or len(archives) != 1:
        lines = [line.strip() for line in process.stderr.splitlines() if line.strip()]
        reason = lines[-1] if lines else f"pip exited with {process.returncode}"
        unreachable = [
            line for line in lines if "NewConnectionError" in line or "Max retries" in line
        ]
        if unreachable:
            reason = f"PyPI could not be reached ({unreachable[-1][:200]})"
        raise VendorSourceError(
            f"could not download {vendor.requirement} from PyPI (its source is what the "
            f"stand-in of {vendor.package} is checked against): {reason}"
        )
    return archives[0]


def _unpack_sources(archive: Path, package: str, folder: Path) -> None:
    """The ``.py`` files of ``package`` in ``archive`` (a wheel, or a source distribution whose
    files lie in one top folder), at their paths below ``folder``."""

    def unpack(name: str, read: Callable[[], bytes | None]) -> None:
        path = PurePosixPath(name)
        if path.suffix == ".py" and path.parts[0] == package and ".." not in path.parts:
            target = folder.joinpath(*path.parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(read() or b"")

    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as wheel:
            for name in wheel.namelist():
                unpack(name, partial(wheel.read, name))
        return
    with tarfile.open(archive) as sdist:
        for member in sdist:
            if member.isfile():
                _, _, name = member.name.partition("/")  # below the 'name-version/' folder
                unpack(name, partial(_read, sdist, member))


def _read(archive: tarfile.TarFile, member: tarfile.TarInfo) -> bytes | None:
    extracted = archive.extractfile(member)
    return extracted.read() if extracted is not None else None


def main() -> int:
    """Fetch every package (at once: pip spends most of its time waiting); one line each."""

    def timed(vendor: VendorPackage) -> str:
        started = time.monotonic()
        cached = vendor.folder.is_dir()
        folder = fetch(vendor)
        archive = (folder / "ARCHIVE").read_text().split()
        how = "cached" if cached else f"downloaded in {time.monotonic() - started:.0f} s"
        size = int(archive[1]) / 1e6
        return f"   {vendor.requirement}: {archive[0]}, {size:.1f} MB, {how}"

    with ThreadPoolExecutor(len(PACKAGES)) as pool:
        futures = [pool.submit(timed, vendor) for vendor in PACKAGES.values()]
        failed = False
        for future in futures:
            try:
                print(future.result())
            except VendorSourceError as error:
                print(f"error: {error}", file=sys.stderr)
                failed = True
    print(f"   (in {cache_root()})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
