"""The top-level README's instructions hold for someone who clones this repository."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess

import pytest
from helpers import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")

#: ``pip install new-backend`` or ``pip install -U new-backend``: from a package index,
#: which has no such package (``pip install 'new-backend @ git+...'`` is fine).
FROM_AN_INDEX = re.compile(r"pip install\s+(?:-U\s+|--upgrade\s+)?new-backend(?![\w-]|\s*@)")


def section(title: str) -> str:
    """The text of the README's section ``## title``, up to the next ``## ``."""
    return README.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_never_installs_new_backend_from_a_package_index() -> None:
    assert FROM_AN_INDEX.findall(README) == []
    assert FROM_AN_INDEX.search("    pip install -U new-backend\n")  # the check can fail
    assert "pip install -e '.[test]'" in section("Quick start")
    assert "new-backend @ git+" in README


def generating_commands(text: str) -> list[list[str]]:
    """The ``new-backend`` commands of a text's code lines that render a project
    (not ``update``, ``check``, ``--list-ops`` ...)."""
    commands = []
    for line in text.splitlines():
        if not line.startswith("    "):
            continue
        for part in line.split("&&"):
            words = shlex.split(part.split("#")[0])
            if words[:1] == ["new-backend"] and not {"update", "check"} & set(words[1:2]):
                commands.append(words)
    return commands


def test_the_quick_start_writes_outside_the_checkout() -> None:
    commands = generating_commands(section("Quick start"))
    assert commands, "the quick start generates nothing?"
    for words in commands:
        assert "-o" in words, f"{shlex.join(words)} writes into the checkout"
        where = words[words.index("-o") + 1]
        assert where.startswith(("..", "/", "~")), f"{shlex.join(words)} writes into the checkout"
    assert generating_commands("    pip install -e . && new-backend\n") == [["new-backend"]]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.parametrize("name", ["dummy", "dummy.backup-20260101-120000", ".dummy.staging-x1"])
def test_default_output_names_are_ignored_in_the_checkout(name: str) -> None:
    inside = subprocess.run(
        ["git", "rev-parse", "--is-inside-work-tree"], cwd=REPO, capture_output=True, text=True
    )
    if inside.stdout.strip() != "true":
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "check-ignore", "-q", f"{name}/x"], cwd=REPO)
    assert ignored.returncode == 0, f"{name}/ in the checkout is not ignored"
    assert subprocess.run(["git", "check-ignore", "-q", "examples/dummy/x"], cwd=REPO).returncode
