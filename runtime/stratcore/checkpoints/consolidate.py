"""Convert a sharded checkpoint folder into one checkpoint file.

Usage: ``python -m <package>.core.consolidate SRC DST``. The file holds full tensors, as a
checkpoint saved with ``state_dict_type="full"`` does, and loads with ``torch.load`` and with
any strategy's ``load_checkpoint``, on any number of processes. Exit code 2 when SRC is not a
sharded checkpoint or cannot be read.
"""

from __future__ import annotations

import argparse
import sys

from .io import CheckpointLoadError
from .sharded import META_FILE, consolidate, is_sharded_checkpoint, resolve_checkpoint


def main(argv: list[str] | None = None) -> int:
    """``python -m stratcore.checkpoints.consolidate SOURCE DESTINATION``: write a sharded checkpoint folder
    as one checkpoint file; the exit code."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {__spec__.name if __spec__ else __name__}",
        description="Convert a sharded checkpoint folder into one checkpoint file.",
    )
    parser.add_argument("source", help="the sharded checkpoint (a folder)")
    parser.add_argument("destination", help="the file to write")
    options = parser.parse_args(argv)
    if not is_sharded_checkpoint(resolve_checkpoint(options.source)):
        print(
            f"error: {options.source} is not a sharded checkpoint (no {META_FILE} in it)",
            file=sys.stderr,
        )
        return 2
    try:
        consolidate(options.source, options.destination)
    except (OSError, ValueError, CheckpointLoadError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {options.destination}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
