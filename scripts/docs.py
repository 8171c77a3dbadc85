"""Build or serve the documentation site: ``mkdocs`` with this repository's settings, and
without the notices that MkDocs' plugins print about their own futures.

    python scripts/docs.py build                  # strict (mkdocs.yml), into site/
    python scripts/docs.py build --site-dir DIR
    python scripts/docs.py serve                  # http://127.0.0.1:8000, rebuilt on each edit

Any other ``mkdocs`` arguments pass through. Material for MkDocs and mkdocs-literate-nav print
about 30 lines about MkDocs' and their own futures on every run started as ``mkdocs``; both
read a variable that silences them, set here, so a build's log holds only what concerns this
site: its warnings and errors.
"""

from __future__ import annotations

import os
import sys

#: The variables that silence other projects' notices (material/templates/__init__.py and
#: properdocs/replacement_warning.py read them).
QUIET = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true"}


def main(argv: list[str] | None = None) -> int:
    os.environ.update(QUIET)
    import click
    from mkdocs.__main__ import cli

    args = sys.argv[1:] if argv is None else argv
    try:
        cli.main(args=args, prog_name="mkdocs", standalone_mode=False)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    except click.ClickException as exc:  # a wrong option (2), a strict build's warnings (1)
        print(f"docs.py: {exc.format_message()}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
