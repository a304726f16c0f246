#!/usr/bin/env python
"""Re-render examples/dummy and every golden case under tests/golden/ with the CLI.

Run it after changing the template or the catalogue, then review the diff:

    python tests/update_golden.py
    git diff --stat examples tests/golden
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import EXAMPLE_DUMMY, GOLDEN, GOLDEN_CASES, REPO, render_with_cli


def replace_tree(source: Path, dest: Path) -> None:
    """Make ``dest`` an exact copy of ``source`` (files that are gone go too)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, dest)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="new-backend-golden-") as scratch:
        scratch_dir = Path(scratch)
        # examples/dummy: exactly what `new-backend` with no arguments writes.
        replace_tree(render_with_cli([], scratch_dir / "example"), EXAMPLE_DUMMY)
        print(f"wrote {EXAMPLE_DUMMY.relative_to(REPO)}")
        for case, args in GOLDEN_CASES.items():
            rendered = render_with_cli(args, scratch_dir / case)
            replace_tree(rendered, GOLDEN / case)
            print(f"wrote {(GOLDEN / case).relative_to(REPO)}  (new-backend {' '.join(args)})")
    for stale in sorted(p for p in GOLDEN.iterdir() if p.is_dir() and p.name not in GOLDEN_CASES):
        shutil.rmtree(stale)
        print(f"removed {stale.relative_to(REPO)} (no longer a golden case)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
