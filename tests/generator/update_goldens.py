"""Regenerate the expected outputs the generator's tests compare against.

    python tests/generator/update_goldens.py

rewrites tests/generator/golden/<case>/ from the fixture projects in
tests/generator/fixtures/golden/<case>/, and tests/generator/fixtures/bad/<case>.expected from
what `stratgen validate` says about each malformed
spec. Review the diff before committing it: it is the change in generated output.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

# The repository's root, where the test tree is the package ``tests``.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.generator import (  # noqa: E402
    BAD,
    GOLDEN,
    bad_cases,
    bad_validate,
    golden_cases,
    golden_render,
    golden_stored,
)


def update_goldens() -> int:
    changed = 0
    for case in golden_cases():
        rendered = golden_render(case)
        if rendered == golden_stored(case):
            continue
        folder = GOLDEN / case
        shutil.rmtree(folder, ignore_errors=True)
        for path, data in rendered.items():
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        print(f"updated tests/generator/golden/{case}/ ({len(rendered)} files)")
        changed += 1
    for stale in sorted(p for p in GOLDEN.iterdir() if p.name not in golden_cases()):
        shutil.rmtree(stale)
        print(f"removed tests/generator/golden/{stale.name}/")
        changed += 1
    return changed


def update_bad_expectations() -> int:
    changed = 0
    for case in bad_cases():
        result = bad_validate(case)
        target = BAD / f"{case}.expected"
        if result.code != 2 or result.out:
            print(f"warning: {case} exits {result.code} with output {result.out!r}; fix the case")
        if not target.is_file() or target.read_text(encoding="utf-8") != result.err:
            target.write_text(result.err, encoding="utf-8")
            print(f"updated tests/generator/fixtures/bad/{case}.expected")
            changed += 1
    return changed


def main() -> int:
    GOLDEN.mkdir(exist_ok=True)
    changed = update_goldens() + update_bad_expectations()
    print(f"{changed} expectation(s) updated." if changed else "Every expectation is up to date.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
