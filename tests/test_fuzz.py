"""Random names and op lists: the generator either renders a project or says why in one line."""

from __future__ import annotations

import json
import keyword
import os
import tempfile
from pathlib import Path

import pytest
from helpers import EXAMPLE_DUMMY, listing, run_cli, tree
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from new_backend import generate_project
from new_backend.catalogue import load_catalogue
from new_backend.exceptions import NewBackendError
from new_backend.validate import CPP_KEYWORDS, RESERVED_BACKEND_NAMES

#: NEW_BACKEND_FUZZ_SCALE=10 runs ten times the examples (a longer hunt for bugs).
SCALE = int(os.environ.get("NEW_BACKEND_FUZZ_SCALE", "1"))
CATALOGUE = load_catalogue()
SPELLINGS = sorted({s for op in CATALOGUE.ops for s in op.spellings})

valid_names = st.from_regex(r"[a-z][a-z0-9]{0,6}(_[a-z0-9]{1,4}){0,2}", fullmatch=True)
names = st.one_of(
    valid_names,  # often a valid name, now and then a keyword or a reserved name
    st.sampled_from(
        [
            *sorted({*keyword.kwlist, *CPP_KEYWORDS, *RESERVED_BACKEND_NAMES}),
            *["", ".", "..", "a/b", "a\\b", "-x", "--force", "ünïcode", "a" * 32, "a" * 33],
        ]
    ),
    st.text(alphabet="abcxyz019_-/. \\\nAZé\x00", max_size=12),
    st.text(max_size=20),  # anything at all, unicode included
)

op_items = st.one_of(
    st.sampled_from(SPELLINGS),
    st.sampled_from(SPELLINGS).map(str.upper),
    st.sampled_from(SPELLINGS).map(lambda s: f" {s.replace('_', '-')} "),
    st.sampled_from(["all", "ALL", "", " ", "allreduc", "all_reduce", "allreduce"]),
    st.text(max_size=12),
)
valid_op_lists = st.lists(
    st.sampled_from(SPELLINGS), min_size=1, max_size=4, unique_by=lambda s: CATALOGUE[s].name
).map(",".join)
op_lists = st.one_of(
    valid_op_lists,  # catalogue spellings, no duplicates
    st.lists(op_items, max_size=5).map(",".join),  # anything: junk, duplicates, empty entries
)
device_lists = st.one_of(
    st.sampled_from(["cpu", "cuda", "cpu,cuda", "cuda,cpu", "CPU"]),
    st.lists(st.sampled_from(["cpu", "cuda", "CPU", "tpu", "", " "]), max_size=3).map(",".join),
)

#: The files every project has, with the package folder named after the backend.
DEFAULT_FILES = sorted(tree(EXAMPLE_DUMMY))


def expected_files(name: str) -> list[str]:
    return sorted(f.replace("dummy_collectives", f"{name}_collectives") for f in DEFAULT_FILES)


def plausible_name(name: str) -> bool:
    """An independent, looser check of what a valid name must at least be."""
    return (
        name.isascii()
        and name.isidentifier()
        and name == name.lower()
        and len(name) <= 32
        and not keyword.iskeyword(name)
        and name not in {"gloo", "nccl", "mpi", "ucc", "xccl", "fake", "undefined", "threaded"}
    )


@settings(
    max_examples=100 * SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=names, ops=op_lists)
def test_cli_dry_run_succeeds_or_fails_in_one_line(
    name: str, ops: str, tmp_path_factory: pytest.TempPathFactory, isolated: dict[str, Path]
) -> None:
    cwd = tmp_path_factory.mktemp("fuzz")
    result = run_cli(["--dry-run", f"--ops={ops}", "--", name], cwd=cwd)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"uncaught {result.exception!r}"
    )
    assert "Traceback" not in result.output
    event(f"exit {result.exit_code}")
    if result.exit_code == 0:
        assert plausible_name(name), f"accepted the name {name!r}"
        lines = result.stdout.splitlines()
        assert lines[0].startswith(f"Would create {name} ")
        assert [line.strip() for line in lines[1:]] == expected_files(name)
    else:
        assert result.exit_code == 2, result.output
        assert result.stdout == ""
        errors = result.stderr.splitlines()
        assert len(errors) == 1 and errors[0].startswith("Error: "), result.stderr
    assert listing(cwd) == {}
    assert listing(isolated["home"]) == {}


@settings(
    max_examples=20 * SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    # Weighted towards valid answers, so that about half the examples render.
    name=st.one_of(valid_names, valid_names, names),
    ops=st.one_of(valid_op_lists, op_lists),
    devices=st.one_of(st.just("cpu,cuda"), device_lists),
)
def test_generate_project_writes_a_complete_project_or_raises_new_backend_error(
    name: str, ops: str, devices: str
) -> None:
    with tempfile.TemporaryDirectory(prefix="new-backend-fuzz-") as scratch:
        out = Path(scratch)
        try:
            result = generate_project(name, ops=ops, devices=devices, output_dir=out)
        except NewBackendError as e:
            event(f"rejected: {type(e).__name__}")
            assert listing(out) == {}, "a failed generation wrote files"
            return
        event("rendered")
        assert [p.name for p in out.iterdir()] == [name]
        assert sorted(tree(out / name)) == expected_files(name) == list(result.files)
        answers = json.loads((out / name / ".new-backend.json").read_text())
        assert answers["backend_name"] == name
        assert answers["ops"] == list(result.answers.ops)
        assert answers["devices"] == list(result.answers.devices)
        assert set(answers["ops"]) <= set(CATALOGUE.names) and answers["ops"]
