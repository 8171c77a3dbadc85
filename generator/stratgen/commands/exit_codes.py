"""What ``stratgen``'s exit status says, for every command.

0: success; 1: drift (``check``, ``generate --dry-run`` with changes: the generated files
differ from what the specs produce); 2: a user error (a bad spec, option or configuration,
reported on stderr, nothing written); 130: interrupted (128 + SIGINT, as shells report it).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_DRIFT = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
