"""A spec is data in every target: descriptions that would end a docstring run nothing when the
generated modules (stratlib, the Lightning plugins, the DeepSpeed accelerators) are imported,
and the device pages hold no HTML from a spec, rendered as the documentation site renders them.
The same classes of input, drawn by hypothesis over every field, are in test_fuzz_untrusted.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.generator import make_project, run_cli
from tests.support.untrusted import (
    ALL_TARGETS,
    MARKER,
    RUN,
    control_characters,
    html_from_spec,
    import_every_module,
    render_page,
    seed,
)

#: What the report's description did: end the docstring, run code, open another.
BREAKOUT = f'Acme device"""; {RUN}; """'


def _project(tmp_path: Path, spec: dict[str, object]) -> Path:
    text = yaml.safe_dump(spec, sort_keys=False, allow_unicode=True)
    return make_project(tmp_path / "project", {"acme.yaml": text}, config=ALL_TARGETS)


def test_descriptions_run_nothing_when_the_generated_modules_are_imported(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    spec = seed()
    spec["accelerator"]["description"] = BREAKOUT
    spec["strategies"][0]["description"] = BREAKOUT.replace("Acme device", "Acme DDP")
    spec["cluster_environments"][0]["description"] = BREAKOUT.replace("device", "scheduler")
    spec["precision_plugins"][0]["description"] = BREAKOUT
    spec["backends"][0]["description"] = BREAKOUT
    root = _project(tmp_path, spec)
    result = run_cli("generate", "--project", root)
    assert result.code == 0, result.err
    out = root / "out"
    rendered = {p.relative_to(out).as_posix() for p in out.rglob("*.py")}
    # Each target rendered a module the description reaches.
    for module in (
        "minilib/lightning/pytorch/acme.py",
        "minilib/lightning/fabric/acme.py",
        "minilib/lightning/environments.py",
        "minilib/deepspeed/acme.py",
        "minilib/strategies/acme_ddp.py",
    ):
        assert module in rendered, sorted(rendered)
    imported = import_every_module(out, "minilib")
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert not (out / MARKER).exists(), "importing a generated module ran a spec's text"


def test_device_pages_hold_no_html_from_a_spec(tmp_path: Path) -> None:
    spec = seed()
    spec["accelerator"]["description"] = "Acme <script>alert(1)</script> {: onclick=x }"
    spec["accelerator"]["install"] = "one <img src=x onerror=alert(2)>\ntwo <fuzzmark>"
    spec["accelerator"]["requires"][0]["install"] = "pip <b onclick=x>acme</b>\n<fuzzmark>"
    option = spec["strategies"][0]["options"]["mode"]
    option["choices"] = ["<script>alert(3)</script>", "<img src=x onerror=alert(4)>", "a|b\nc"]
    option["default"] = "<script>alert(3)</script>"
    option["doc"] = "<fuzzmark onclick=x> `x|y` {: onclick=x }"
    spec["strategies"][0]["aliases"] = {"acme_ddp_img": {"mode": "<img src=x onerror=alert(4)>"}}
    spec["strategies"][0]["description"] = "[fuzz](javascript:alert(5)) ``a`b`` `<fuzzmark>`"
    root = _project(tmp_path, spec)
    result = run_cli("generate", "--project", root)
    assert result.code == 0, result.err
    pages = sorted((root / "out" / "docs").glob("*.md"))
    assert {"acme.md", "index.md"} <= {p.name for p in pages}
    for page in pages:
        html = render_page(page.read_text(encoding="utf-8"))
        assert html_from_spec(html) == [], page.name
        # What was escaped is shown as text: the device page shows the spec's values.
        if page.name == "acme.md":
            assert "&lt;script&gt;alert(3)&lt;/script&gt;" in html


def test_list_prints_no_control_character_of_a_spec(tmp_path: Path) -> None:
    spec = seed()
    spec["accelerator"]["install"] = "\x1b[31mred\x1b[0m \x1b]0;title\x07 \u202eevil\u2028x"
    root = _project(tmp_path, spec)
    result = run_cli("list", "--no-probe", "--project", root)
    assert result.code == 0, result.err
    assert "red" in result.out and "evil" in result.out
    assert control_characters(result.out) == []
    assert "\\x1b[31mred" in result.out, "the escape is shown as text"
