"""pytest plugin for mutate.py: several mutants, one run of a generated suite.

``NEW_BACKEND_MUTANT_OF`` maps test ids to the mutant they must catch. Once a
test of a mutant fails, its other tests are skipped (the mutant is killed), and
the first failing test of each mutant is written, as it happens, to the JSON
file ``NEW_BACKEND_MUTANTS_KILLED`` names.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

_MUTANT_OF: dict[str, str] = json.loads(os.environ.get("NEW_BACKEND_MUTANT_OF", "{}"))
_KILLED_FILE = os.environ.get("NEW_BACKEND_MUTANTS_KILLED")
_KILLED: dict[str, str] = {}


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skips the remaining tests of a mutant that is already killed."""
    mutant = _MUTANT_OF.get(item.nodeid)
    if mutant in _KILLED:
        pytest.skip(f"{mutant} is killed")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Records the first failing test of each mutant."""
    mutant = _MUTANT_OF.get(report.nodeid)
    if report.failed and mutant is not None and mutant not in _KILLED:
        _KILLED[mutant] = report.nodeid
        if _KILLED_FILE:
            Path(_KILLED_FILE).write_text(json.dumps(_KILLED))
