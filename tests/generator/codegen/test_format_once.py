"""black runs once over each generated file (``stratgen.codegen.formatting``): its own second pass, which
``black.format_str`` adds for optional trailing commas that the first pass turns into magic
ones, must find nothing to change in what stratgen writes. Checked over the checked-in
package and tests and every golden project (the hostile one included)."""

from __future__ import annotations

from pathlib import Path

import black
import pytest

from stratgen.codegen.formatting import LINE_LENGTH

REPO = Path(__file__).resolve().parents[3]
TREES = [REPO / "generated", *sorted((REPO / "tests" / "generator" / "golden").iterdir())]
MODE = black.Mode(line_length=LINE_LENGTH, target_versions={black.TargetVersion.PY311})


@pytest.mark.parametrize("tree", TREES, ids=lambda tree: tree.name)
def test_one_pass_leaves_nothing_for_a_second(tree: Path) -> None:
    files = sorted(tree.rglob("*.py"))
    assert files, f"no Python files under {tree}"
    unstable = [
        str(path.relative_to(tree))
        for path in files
        if black.format_str(text := path.read_text(encoding="utf-8"), mode=MODE) != text
    ]
    assert unstable == [], f"black would change these files again: {unstable}"
