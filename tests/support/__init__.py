"""What tests share: the repository's root (``REPO``), running stratgen and building projects
(``generator``), user projects made by ``stratgen init`` (``user_projects``), the import graph of
a package (``import_graph``), and the modules that the processes of some tests import from the
test tree (``job_modules/``).
"""

from __future__ import annotations

from pathlib import Path

#: The repository's root folder.
REPO = Path(__file__).resolve().parents[2]
