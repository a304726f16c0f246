"""Three-way merge of one text file, and unified diffs, for ``new-backend update``.

:func:`merge3` uses ``git merge-file`` when git is installed: the merge users
already know (it honours their ``merge.conflictStyle``), with git's diff
quality. Without git it falls back to :func:`diff3`, a plain diff3 in Python
(the classic algorithm on top of :mod:`difflib`): the same clean merges and the
same conflict markers for the cases update meets, so a project is updatable
on a machine without git too.
"""

from __future__ import annotations

import difflib
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

MARKER = 7


@dataclass(frozen=True)
class Merged:
    """The merged text and how many conflicts (marked regions) it has."""

    text: str
    conflicts: int


def merge3(
    base: str,
    ours: str,
    theirs: str,
    labels: tuple[str, str, str] = ("yours", "base", "template"),
    engine: str = "auto",
) -> Merged:
    """Merge the changes from ``base`` to ``ours`` and from ``base`` to ``theirs``.

    ``labels`` name ours, base and theirs in the conflict markers. ``engine``
    is ``"git"``, ``"python"`` or ``"auto"`` (git when installed).
    """
    git = shutil.which("git") if engine in ("auto", "git") else None
    if engine == "git" and git is None:
        raise RuntimeError("git is not installed")
    if git is None:
        return diff3(base, ours, theirs, labels)
    with tempfile.TemporaryDirectory(prefix="new-backend-merge-") as scratch:
        paths = []
        for name, text in zip(("ours", "base", "theirs"), (ours, base, theirs), strict=True):
            path = Path(scratch, name)
            path.write_bytes(text.encode("utf-8"))
            paths.append(str(path))
        done = subprocess.run(
            [git, "merge-file", "-p", "-L", labels[0], "-L", labels[1], "-L", labels[2], *paths],
            cwd=scratch,
            capture_output=True,
        )
    if done.returncode < 0 or done.returncode > 127:
        return diff3(base, ours, theirs, labels)  # git failed: not a conflict count
    return Merged(done.stdout.decode("utf-8"), done.returncode)


def _matches(a: list[str], b: list[str]) -> dict[int, int]:
    """Line ``i`` of ``a`` -> the line of ``b`` it is matched with, for matched lines."""
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return {
        block.a + k: block.b + k
        for block in matcher.get_matching_blocks()
        for k in range(block.size)
    }


def diff3(
    base: str, ours: str, theirs: str, labels: tuple[str, str, str] = ("yours", "base", "template")
) -> Merged:
    """A three-way merge in pure Python: the diff3 algorithm, git's marker format.

    Lines matched in all three versions are stable; between them, a chunk that
    only one side changed takes that side's lines, a chunk both changed alike
    takes them once, and anything else is a conflict. Lines both sides share
    at the edges of a conflict are kept outside the markers, as git does.
    """
    b, o, t = (text.splitlines(keepends=True) for text in (base, ours, theirs))
    to_ours, to_theirs = _matches(b, o), _matches(b, t)
    out: list[str] = []
    conflicts = 0
    ib = io = it = 0
    while True:
        i = ib
        while i < len(b) and not (i in to_ours and i in to_theirs):
            i += 1
        if i < len(b) and i == ib and to_ours[i] == io and to_theirs[i] == it:
            out.append(b[i])
            ib, io, it = i + 1, io + 1, it + 1
            continue
        eo, et = (to_ours[i], to_theirs[i]) if i < len(b) else (len(o), len(t))
        chunk_b, chunk_o, chunk_t = b[ib:i], o[io:eo], t[it:et]
        if chunk_o == chunk_b:
            out += chunk_t
        elif chunk_t == chunk_b or chunk_o == chunk_t:
            out += chunk_o
        else:
            conflicts += 1
            out += _conflict(chunk_o, chunk_t, labels)
        if i >= len(b):
            break
        ib, io, it = i, eo, et
    return Merged("".join(out), conflicts)


def _conflict(ours: list[str], theirs: list[str], labels: tuple[str, str, str]) -> list[str]:
    head = 0
    while head < min(len(ours), len(theirs)) and ours[head] == theirs[head]:
        head += 1
    tail = 0
    while tail < min(len(ours), len(theirs)) - head and ours[-1 - tail] == theirs[-1 - tail]:
        tail += 1
    mid_o, mid_t = ours[head : len(ours) - tail], theirs[head : len(theirs) - tail]

    def ended(lines: list[str]) -> list[str]:
        return (
            [*lines[:-1], lines[-1] if lines[-1].endswith("\n") else lines[-1] + "\n"]
            if lines
            else []
        )

    return [
        *ours[:head],
        f"{'<' * MARKER} {labels[0]}\n",
        *ended(mid_o),
        f"{'=' * MARKER}\n",
        *ended(mid_t),
        f"{'>' * MARKER} {labels[2]}\n",
        *ours[len(ours) - tail :],
    ]


def unified_diff(path: str, before: bytes | None, after: bytes | None) -> str:
    """A ``git diff``-style unified diff of one file (``None``: the file does not exist)."""
    old = "/dev/null" if before is None else f"a/{path}"
    new = "/dev/null" if after is None else f"b/{path}"
    try:
        a = (before or b"").decode("utf-8").splitlines(keepends=True)
        b = (after or b"").decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return f"Binary files {old} and {new} differ\n"
    lines = []
    for line in difflib.unified_diff(a, b, fromfile=old, tofile=new):
        lines.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(lines)
