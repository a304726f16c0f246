"""What a new user meets first in the top-level README: an install command that works."""

from __future__ import annotations

import re

from helpers import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_the_readme_makes_up_no_url_for_this_repository() -> None:
    """pyproject.toml names no URL for the repository, so the README does not guess one
    (``https://<git host>/<owner>/...``): git+URL is the URL the user clones from."""
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert not re.search(r"^\[project\.urls\]", pyproject, re.MULTILINE)
    assert re.findall(r"https?://[^\s`'\"]*(?:<|\.\.\.)", README) == []
    assert "pip install 'new-backend @ git+URL'" in README
    assert "pip install -e\n'.[test]'" in README or "pip install -e '.[test]'" in README
