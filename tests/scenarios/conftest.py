"""Fixtures shared by the scenario modules."""

from __future__ import annotations

import pytest

import cosim
from cosim.hub.studies.search import SearchResult

from .test_search import SPACE


@pytest.fixture(scope="session")
def serial(tmp_path_factory: pytest.TempPathFactory) -> SearchResult:
    """The search of test_search.SPACE in this process, run once for every module whose executors
    (process pool, Ray) must rank as it does."""
    return cosim.search(SPACE, output_dir=tmp_path_factory.mktemp("serial"))
