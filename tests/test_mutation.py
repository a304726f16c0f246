"""The generated test suites catch every plausible bug in mutation/mutants.toml.

The cheap checks (every patch still applies to a fresh render, the harness
selects and reverts correctly) run everywhere. ``test_every_mutant_is_killed``
(markers ``build`` and ``mutation``) builds a store, an mpi and a ucx project and runs
the whole catalogue through mutation/mutate.py: a mutant that survives is a
test missing from the template.
"""

from __future__ import annotations

import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import REPO
from new_backend.catalogue import load_catalogue

sys.path.insert(0, str(REPO / "mutation"))
import mutate

MUTANTS = mutate.load_mutants()


def test_catalogue_names_ops_and_covers_both_implementations() -> None:
    ops = {op.name for op in load_catalogue().ops}
    for mutant in MUTANTS:
        assert mutant.op in ops, mutant.id
        assert mutant.description, mutant.id
    for impl in mutate.IMPLS:
        assert [m for m in MUTANTS if m.impl == impl and not m.bench], impl
        assert [m for m in MUTANTS if m.impl == impl and m.bench], impl


@pytest.mark.parametrize("impl", mutate.IMPLS)
def test_every_patch_applies_exactly_once_to_a_fresh_render(impl: str, tmp_path: Path) -> None:
    """A patch that no longer matches the template fails here, without building anything."""
    project = mutate.render(impl, tmp_path)
    for mutant in [m for m in MUTANTS if m.impl == impl]:
        for patch in mutant.patches:
            text = (project / patch.file).read_text()
            assert mutate.apply_patch(text, patch) != text, mutant.id


def test_a_patch_applies_within_its_scope_only() -> None:
    text = "void a(int x) {\n  f(x);\n}\n\nvoid b(int x) {\n  f(x);\n}\n"
    patch = mutate.Patch("ops.cpp", "f(x);", "g(x);", scope="b")
    expected = "void a(int x) {\n  f(x);\n}\n\nvoid b(int x) {\n  g(x);\n}\n"
    assert mutate.apply_patch(text, patch) == expected
    with pytest.raises(mutate.MutationError, match="2 times"):
        mutate.apply_patch(text, mutate.Patch("ops.cpp", "f(x);", "g(x);"))
    with pytest.raises(mutate.MutationError, match="no definition"):
        mutate.apply_patch(text, mutate.Patch("ops.cpp", "f(x);", "g(x);", scope="c"))


def test_mutated_restores_the_project(tmp_path: Path) -> None:
    source = tmp_path / "csrc" / "ops.cpp"
    source.parent.mkdir()
    source.write_text("void a() {\n  f();\n}\n")
    patch = mutate.Patch("csrc/ops.cpp", "f", "g")
    mutant = mutate.Mutant("m", "store", "broadcast", "d", (patch,))
    with pytest.raises(RuntimeError), mutate.mutated(tmp_path, mutant):
        assert source.read_text() == "void a() {\n  g();\n}\n"
        raise RuntimeError("a failing build")
    assert source.read_text() == "void a() {\n  f();\n}\n"


def test_select_takes_the_op_and_world_sizes_asked_for() -> None:
    ids = [
        "tests/test_ops.py::test_op[world2-reduce]",
        "tests/test_ops.py::test_op[world2-allreduce]",
        "tests/test_ops.py::test_op[world4-reduce]",
        "tests/test_ops.py::test_op_in_subgroups[world3-reduce]",
        "tests/test_ops.py::test_recv_matches_messages_by_tag[world3]",
        "tests/test_matrix.py::test_dtypes_and_reduce_ops_like_gloo[world2-reduce]",
    ]
    mutant = mutate.Mutant("m", "store", "reduce", "d", ())
    assert mutate.select(ids, mutant) == [ids[0], ids[3], ids[5]]
    by_tag = ("test_ops.py::test_recv_matches_messages_by_tag",)
    tagged = mutate.Mutant("m", "store", "recv", "d", (), tests=by_tag)
    assert mutate.select(ids, tagged) == [ids[4]]
    with pytest.raises(mutate.MutationError, match="no test selected"):
        mutate.select(ids, mutate.Mutant("m", "store", "gather", "d", ()))


@pytest.fixture(scope="session")
def reports(request: pytest.FixtureRequest) -> dict[str, Future[mutate.Report]]:
    """The catalogue run on the all-ops projects test_build built, by implementation (only the
    patched file recompiles). Two implementations run at a time: a run alternates between
    compiling one file, on one core, and a generated suite that leaves a core idle."""
    selected = {
        item.callspec.params["impl"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_every_mutant_is_killed"
    }
    projects = {}
    for impl in [impl for impl in mutate.IMPLS if impl in selected]:
        try:
            projects[impl] = request.getfixturevalue(f"built_{impl}").project
        except pytest.skip.Exception:
            continue  # no UCX here: test_every_mutant_is_killed[ucx] skips

    def run(impl: str) -> mutate.Report:
        mutants = [m for m in MUTANTS if m.impl == impl]
        project = projects[impl]
        return mutate.run(mutants, project.parent, log=lambda line: None, projects={impl: project})

    with ThreadPoolExecutor(max_workers=2) as pool:
        return {impl: pool.submit(run, impl) for impl in projects}


@pytest.mark.build
@pytest.mark.mutation
@pytest.mark.timeout(2400)
@pytest.mark.parametrize("impl", mutate.IMPLS)
def test_every_mutant_is_killed(
    impl: str, reports: dict[str, Future[mutate.Report]], request: pytest.FixtureRequest
) -> None:
    """Each mutant must make its op's tests fail, on the all-ops ``impl`` project."""
    request.getfixturevalue(f"built_{impl}")  # where it could not be built, skips saying why
    report = reports[impl].result()
    print(report.summary())
    assert report.outcomes and report.killed == len(report.outcomes), report.summary()


OPS_CPP = """inline int helper(int x) {
  return x;
}

void alpha(const OpContext& ctx) {
  helper(1);
}

void beta(const OpContext& ctx) {
  exchange(ctx).helper(2);
}
"""


def test_footprint_follows_helpers_but_not_methods() -> None:
    ops = {"alpha", "beta"}

    def mutant(*patches: mutate.Patch, op: str = "alpha") -> mutate.Mutant:
        made.append(mutate.Mutant(f"m{len(made)}", "store", op, "d", patches))
        return made[-1]

    made: list[mutate.Mutant] = []

    in_helper = mutant(mutate.Patch("csrc/ops.cpp", "return x;", "return -x;", "helper"))
    assert mutate.footprint(OPS_CPP, in_helper, ops) == {"alpha"}
    in_beta = mutant(mutate.Patch("csrc/ops.cpp", "(2)", "(3)", "beta"), op="beta")
    assert mutate.footprint(OPS_CPP, in_beta, ops) == {"beta"}
    insertion = mutate.Patch("csrc/ops.cpp", "void alpha", "int added;\nvoid alpha")
    assert mutate.footprint(OPS_CPP, mutant(insertion), ops) == set()
    rewrite = mutate.Patch("csrc/ops.cpp", "helper(1)", "helper(2)")
    rewriting = mutant(rewrite)
    assert mutate.footprint(OPS_CPP, rewriting, ops) is None
    # alpha's tests would see the helper mutant: never in one run with it.
    assert mutate.batches([in_helper, in_beta], OPS_CPP, ops) == [[in_helper, in_beta]]
    alpha_too = mutant(mutate.Patch("csrc/ops.cpp", "(1)", "(0)", "alpha"))
    assert mutate.batches([in_helper, alpha_too], OPS_CPP, ops) == [[in_helper], [alpha_too]]
    assert mutate.batches([rewriting, in_beta], OPS_CPP, ops) == [[rewriting], [in_beta]]
