"""Every target a project asks for, rendered into one plan of files.

The stratlib target is always rendered; the Lightning, deepspeed and docs targets where the
project's ``targets`` name them (each imported only then). Templates are looked up first in
the project's own template folder (if configured), then in stratgen's built-in ones
(``Renderer``). The plan is returned, path by path, before anything touches the disk.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import jinja2

from ..codegen.templating import RenderedFile, Renderer, template_problem
from ..resolve.catalog import Catalog
from ..resolve.selection import Selection
from ..spec.errors import StratgenError
from .stratlib.package import render_package

if TYPE_CHECKING:
    from .docs.verification import Record


def render_targets(
    catalog: Catalog,
    selection: Selection,
    renderer: Renderer,
    package: str,
    package_dir: str,
    tests_dir: str,
    docs_dir: str,
    targets: Iterable[str] = ("stratlib",),
    verification: Record | None = None,
) -> list[RenderedFile]:
    """Every file of the package and its tests, for each target; a broken template is a clean
    error. ``verification`` is the project's record of what its devices ran on (docs target)."""
    targets = tuple(targets)
    try:
        files = render_package(catalog, selection, renderer, package, package_dir, tests_dir)
        if "lightning" in targets:
            from .lightning.plugins import render_plugins

            files += render_plugins(catalog, selection, renderer, package, package_dir, tests_dir)
        if "deepspeed" in targets:
            from .deepspeed.accelerators import render_accelerators

            files += render_accelerators(catalog, selection, renderer, package_dir)
        if "docs" in targets:
            from .docs.device_pages import render_pages

            files += render_pages(
                catalog, selection, renderer, package, tests_dir, docs_dir, targets, verification
            )
        return files
    except jinja2.TemplateError as exc:
        raise StratgenError(template_problem(exc)) from None
