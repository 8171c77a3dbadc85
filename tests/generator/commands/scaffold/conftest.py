"""Fixtures for the tests of `stratgen init`, `stratgen new` and user projects."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.user_projects import init_project, stratgen


@pytest.fixture
def new_project(tmp_path: Path) -> Path:
    """A project just made by `stratgen init --defaults`, not generated yet."""
    return init_project(tmp_path / "acme")


@pytest.fixture
def generated_project(new_project: Path) -> Path:
    result = stratgen("generate", "--project", new_project)
    assert result.code == 0, result.err
    return new_project


@pytest.fixture(scope="session")
def shared_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated project that tests only read."""
    project = init_project(tmp_path_factory.mktemp("shared") / "acme")
    result = stratgen("generate", "--project", project)
    assert result.code == 0, result.err
    return project
