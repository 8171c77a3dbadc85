"""``python -m stratgen_testdevice build``: builds the test device once (for .ci/setup).

Prints one line: where the library is, or why it did not build (and where the log is), then
exits 1. The device is not optional: a failed build must fail CI.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["build"]:
        print("usage: python -m stratgen_testdevice build", file=sys.stderr)
        return 2
    start = time.monotonic()
    try:
        import stratgen_testdevice

        folder = stratgen_testdevice.build()
    except Exception as error:
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"stratgen test device: build failed: {message}", flush=True)
        return 1
    took = time.monotonic() - start
    print(f"stratgen test device: built or cached in {folder} ({took:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
