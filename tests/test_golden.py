"""examples/dummy and tests/golden/<case>/ are exactly what the CLI renders today."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import (
    EXAMPLE_DUMMY,
    GOLDEN,
    GOLDEN_CASES,
    UPDATE_COMMAND,
    render_with_cli,
    tree,
    tree_difference,
)

HINT = f"\nIf the change is intended, regenerate with `{UPDATE_COMMAND}` and review the diff."


def test_example_dummy_is_a_fresh_render_of_new_backend_without_arguments(tmp_path: Path) -> None:
    fresh = render_with_cli([], tmp_path)
    assert tree(fresh), "the default render is empty"
    difference = tree_difference(EXAMPLE_DUMMY, fresh)
    assert difference is None, f"examples/dummy is out of date:\n{difference}{HINT}"


@pytest.mark.parametrize("case", sorted(GOLDEN_CASES))
def test_golden_case_matches_a_fresh_render(case: str, tmp_path: Path) -> None:
    args = GOLDEN_CASES[case]
    fresh = render_with_cli(args, tmp_path)
    difference = tree_difference(GOLDEN / case, fresh)
    assert difference is None, (
        f"tests/golden/{case} (new-backend {' '.join(args)}) is out of date:\n{difference}{HINT}"
    )


def test_every_golden_folder_is_a_case() -> None:
    folders = {p.name for p in GOLDEN.iterdir() if p.is_dir()}
    assert folders == set(GOLDEN_CASES), f"stale or missing golden folders.{HINT}"


def test_tree_difference_reports_the_first_differing_file_as_a_unified_diff(
    tmp_path: Path,
) -> None:
    """The comparison itself: a changed byte, a missing and an extra file are all reported."""
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        (root / "sub").mkdir(parents=True)
        (root / ".hidden").write_text("same\n")
    (a / "sub" / "f.txt").write_text("one\ntwo\n")
    (b / "sub" / "f.txt").write_text("one\nTWO\n")
    (a / "gone.txt").write_text("x")
    (b / "new.txt").write_text("x")
    message = tree_difference(a, b)
    assert message is not None
    assert "['gone.txt']" in message and "['new.txt']" in message
    assert "-two\n" in message and "+TWO\n" in message and "sub/f.txt" in message
    (b / ".hidden").write_text("changed\n")
    assert ".hidden" in tree_difference(a, b)
    assert tree_difference(a, a) is None
