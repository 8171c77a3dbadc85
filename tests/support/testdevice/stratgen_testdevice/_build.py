"""Building the C++ extension of the test device, once per torch version and source hash.

The library lives in ``<cache>/<key>/`` where ``<cache>`` is ``$STRATGEN_TESTDEVICE_CACHE`` or
``${XDG_CACHE_HOME:-~/.cache}/stratgen/testdevice`` and ``<key>`` names the torch version, the
Python version and a hash of the sources and flags. The sources are copied into that folder before
ninja runs, so their timestamps (a fresh clone's, say) never make ninja rebuild a cached library. An
exclusive lock on ``<cache>/.lock`` serialises builds: a process that finds another building waits
for it and then uses its library; the lock goes with its holder, so a killed build leaves none.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TextIO

import torch

EXTENSION = "stratgen_testdevice_ext"
CACHE_ENV = "STRATGEN_TESTDEVICE_CACHE"
_CSRC = Path(__file__).resolve().parent / "csrc"
_SOURCES = ("device.cpp", "backend.cpp")
_HEADERS = ("testdevice.h",)
_CFLAGS = ("-O1",)
_DONE = "built"  # written last: a folder without it is an unfinished build


class BuildError(RuntimeError):
    """The extension did not build or load; the message is one line that says why."""


def cache_root() -> Path:
    if folder := os.environ.get(CACHE_ENV):
        return Path(folder)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "stratgen" / "testdevice"


def build_key() -> str:
    digest = hashlib.sha256(repr(_CFLAGS).encode())
    for name in (*_HEADERS, *_SOURCES):
        digest.update(name.encode() + b"\0" + (_CSRC / name).read_bytes())
    python = f"{sys.version_info.major}{sys.version_info.minor}"
    return f"torch-{torch.__version__}-py{python}-{digest.hexdigest()[:16]}"


def build_dir() -> Path:
    return cache_root() / build_key()


def build_log_path() -> Path:
    """The log of the latest build of these sources (compiler output, or why loading failed)."""
    return cache_root() / f"{build_key()}.log"


def extension() -> ModuleType:
    """The extension module, built first if the cache does not hold it yet.

    In one process, call it once (stratgen_testdevice.load does): each call loads the library.
    """
    folder = build_dir()
    if not (folder / _DONE).exists():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with open(folder.parent / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (folder / _DONE).exists():
                return _build(folder)  # cpp_extension.load has loaded it already
    return _import(folder / f"{EXTENSION}.so")


def _build(folder: Path) -> ModuleType:
    import torch.utils.cpp_extension as cpp_extension

    shutil.rmtree(folder, ignore_errors=True)  # an unfinished build's leftovers
    sources = folder / "src"
    sources.mkdir(parents=True)
    for name in (*_SOURCES, *_HEADERS):
        shutil.copyfile(_CSRC / name, sources / name)
    log = build_log_path()
    start = time.monotonic()
    with open(log, "w") as out:
        try:
            with _output_to(out):
                module = cpp_extension.load(
                    name=EXTENSION,
                    sources=[str(sources / name) for name in _SOURCES],
                    extra_cflags=list(_CFLAGS),
                    build_directory=str(folder),
                    verbose=True,
                )
        except Exception as error:
            print(f"\n{type(error).__name__}: {error}", file=out)
            out.flush()
            raise BuildError(f"{_first_error(log, error)} (log: {log})") from error
        print(f"built in {time.monotonic() - start:.1f} s", file=out)
    (folder / _DONE).write_text(f"{time.monotonic() - start:.1f}\n")
    return module


def _import(library: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(EXTENSION, library)
    if spec is None or spec.loader is None:
        raise BuildError(f"cannot load {library}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as error:  # e.g. a symbol this torch does not export
        raise BuildError(f"cannot load {library}: {error}") from error
    sys.modules[EXTENSION] = module
    return module


@contextlib.contextmanager
def _output_to(out: TextIO) -> Iterator[None]:
    """Sends this process's stdout and stderr (file descriptors 1 and 2: ninja's) to ``out``."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    try:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _first_error(log: Path, error: Exception) -> str:
    """The compiler's or linker's first error line, else the exception's first line."""
    for line in log.read_text(errors="replace").splitlines():
        if re.search(r"\berror\b", line, re.IGNORECASE) and not line.startswith("FAILED:"):
            return line.strip()
    first = str(error).strip().splitlines()
    return f"{type(error).__name__}: {first[0] if first else ''}"
