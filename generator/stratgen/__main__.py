"""``python -m stratgen`` and the ``stratgen`` command.

``stratgen check`` and ``stratgen generate`` of a project whose tree is known current are
answered from the record of ``uptodate`` before the rest of stratgen is imported; everything
else runs in ``cli``.
"""

import sys


def main() -> int:
    from .uptodate import answer

    answered = answer(sys.argv[1:])
    if answered is not None:
        return answered
    from .cli import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())
