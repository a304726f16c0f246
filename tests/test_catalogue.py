"""The catalogue of ops: consistent with itself, with torch's c10d headers and with the template."""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import MISSING, fields

import pytest
import tomllib
from conftest import Render
from new_backend.catalogue import CATALOGUE_FILE, Catalogue, Op


def test_names_and_aliases_are_unique(catalogue: Catalogue) -> None:
    spellings = Counter(s.lower().replace("-", "_") for op in catalogue.ops for s in op.spellings)
    assert [s for s, n in spellings.items() if n > 1] == []
    assert "all" not in spellings  # `--ops all` means every op


def test_every_spelling_looks_up_its_own_op(catalogue: Catalogue) -> None:
    for op in catalogue.ops:
        for spelling in op.spellings:
            assert catalogue.get(spelling) is op
            assert catalogue.get(spelling.upper()) is op


def test_every_op_table_spells_out_every_field() -> None:
    raw = tomllib.loads(CATALOGUE_FILE.read_text())["op"]
    required = {f.name for f in fields(Op) if f.default is MISSING}
    assert {"test", "checks", "body", "dummy", "params"} <= required
    for table in raw:
        assert required <= table.keys(), f"{table.get('name')} lacks {required - table.keys()}"


#: Text fields an op may leave empty: `inputs` for ops that work in place,
#: `test_in_place` for ops with no aliased form.
OPTIONAL_TEXT = {"inputs", "test_in_place"}


@pytest.mark.parametrize(
    "field", [f.name for f in fields(Op) if f.type == "str" and f.name not in OPTIONAL_TEXT]
)
def test_every_op_fills_every_text_field(catalogue: Catalogue, field: str) -> None:
    """Only an op without tensors (barrier) may leave its checks and body parameters empty."""
    for op in catalogue.ops:
        if field in ("checks", "body", "args") and "Tensor" not in op.params:
            continue
        assert getattr(op, field).strip(), f"{op.name} has an empty {field}"


def test_every_test_case_is_python(catalogue: Catalogue) -> None:
    for op in catalogue.ops:
        ast.parse(op.test, filename=f"catalogue.toml [{op.name}].test")
        ast.parse(op.test_in_place, filename=f"catalogue.toml [{op.name}].test_in_place")


def test_the_ops_fsdp2_calls_in_place_have_an_in_place_case(catalogue: Catalogue) -> None:
    """all_gather_into_tensor and reduce_scatter_tensor (and their coalesced forms)."""
    in_place = {op.name for op in catalogue.ops if op.test_in_place}
    assert in_place == {
        "_allgather_base",
        "allgather_into_tensor_coalesced",
        "_reduce_scatter_base",
        "reduce_scatter_tensor_coalesced",
    }


def test_every_op_is_overridden_in_the_all_ops_project(
    catalogue: Catalogue, render: Render
) -> None:
    project = render("allops", ops="all").target
    collectives = (project / "csrc" / "collectives.hpp").read_text()
    overrides = set(
        re.findall(r"^  c10::intrusive_ptr<c10d::Work> (\w+)\(", collectives, re.MULTILINE)
    )
    for op in catalogue.ops:
        assert set(op.canonical_names) <= overrides, op.name
    ops_cpp = (project / "csrc" / "ops.cpp").read_text()
    for op in catalogue.ops:
        name = re.escape(op.name)
        assert re.search(rf"ops::{name}\(ctx", collectives), f"{op.name}'s override calls no body"
        assert re.search(rf"^\S.* {name}\(const OpContext& ctx", ops_cpp, re.MULTILINE), (
            f"{op.name} has no body in ops.cpp"
        )
    for path in project.rglob("*.py"):
        ast.parse(path.read_text(), filename=str(path))


def test_a_project_overrides_only_the_ops_it_was_given(
    catalogue: Catalogue, render: Render
) -> None:
    project = render("some", ops="allreduce,send").target
    collectives = (project / "csrc" / "collectives.hpp").read_text()
    overrides = set(
        re.findall(r"^  c10::intrusive_ptr<c10d::Work> (\w+)\(", collectives, re.MULTILINE)
    )
    assert overrides == {"allreduce", "send"}
