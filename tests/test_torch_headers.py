"""The catalogue against the installed torch's c10d headers.

When torch adds, removes, renames or changes a collective of c10d::Backend,
these tests fail and say exactly what changed and what to update in
catalogue.toml (an op, an alias, `since`, `renamed`, or `[not_supported]`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sysconfig
from pathlib import Path

import pytest
from conftest import Render
from new_backend.catalogue import Catalogue, Op, release

torch = pytest.importorskip("torch")
TORCH = release(torch.__version__)
C10D = Path(torch.__file__).parent / "include" / "torch" / "csrc" / "distributed" / "c10d"


def header(name: str) -> str:
    """A c10d header without its comments."""
    text = (C10D / name).read_text()
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL))


def overridable_collectives() -> dict[str, str]:
    """Backend.hpp's virtual methods that return a Work: name -> parameter list."""
    found = re.findall(
        r"virtual\s+c10::intrusive_ptr<Work>\s+(\w+)\s*\(([^)]*)\)", header("Backend.hpp")
    )
    return dict(found)


def param_types(params: str) -> list[str]:
    """``"const c10d::BroadcastOptions& opts = ..."`` -> ``["const BroadcastOptions&"]``."""
    types = []
    for param in params.split(","):
        words = param.split("=")[0].replace("c10d::", "").split()
        if len(words) > 1 and re.fullmatch(r"\w+", words[-1]):
            words = words[:-1]  # the parameter's name
        types.append(" ".join(words).replace(" &", "&"))
    return types


def present(op: Op) -> bool:
    """Whether the installed torch has this op."""
    return op.since is None or release(op.since) <= TORCH


def cpp_names(op: Op) -> set[str]:
    """The names this op's override has in the installed torch."""
    if op.renamed and op.renamed.torch_version <= TORCH:
        return {op.renamed.name}
    return {op.name}


def test_every_collective_of_torch_is_an_op_or_not_supported_with_a_reason(
    catalogue: Catalogue,
) -> None:
    unknown = [
        name
        for name in overridable_collectives()
        if catalogue.get(name) is None and name not in catalogue.not_supported
    ]
    assert not unknown, (
        f"torch {torch.__version__} has collectives the catalogue does not know: {unknown}. "
        "Add each to catalogue.toml as an op (or an alias of one), or to [not_supported] "
        "with the reason."
    )


def test_every_op_is_a_collective_of_torch(catalogue: Catalogue) -> None:
    collectives = overridable_collectives()
    missing = [
        f"{op.name} (as {sorted(cpp_names(op))})"
        for op in catalogue.ops
        if present(op) and not cpp_names(op) <= collectives.keys()
    ]
    assert not missing, (
        f"torch {torch.__version__} has no such virtual method in Backend.hpp: {missing}. "
        "It was removed or renamed: update the op's `renamed` or `since`."
    )
    early = [op.name for op in catalogue.ops if not present(op) and op.name in collectives]
    assert not early, f"{early} exist in torch {torch.__version__}: their `since` is too new"


def test_every_op_signature_matches_torch(catalogue: Catalogue) -> None:
    collectives = overridable_collectives()
    changed = []
    for op in catalogue.ops:
        for name in cpp_names(op) & collectives.keys():
            theirs, ours = param_types(collectives[name]), param_types(op.params)
            if theirs != ours:
                changed.append(
                    f"{name}: torch has ({', '.join(theirs)}), catalogue ({', '.join(ours)})"
                )
    assert not changed, "signatures changed:\n" + "\n".join(changed)


def test_deprecated_aliases_of_torch_map_to_their_op(catalogue: Catalogue) -> None:
    """A collective torch keeps under an old name (e.g. _allgather_base) maps to the same op."""
    collectives = overridable_collectives()
    for name, params in collectives.items():
        op = catalogue.get(name)
        if op is not None:
            assert param_types(params) == param_types(op.params), name


def test_op_types_exist_in_torch(catalogue: Catalogue) -> None:
    enum = re.search(r"enum class OpType[^{]*\{(.*?)\}", header("Work.hpp"), re.DOTALL)
    assert enum
    op_types = set(re.findall(r"(\w+)\s*=", enum.group(1)))
    for op in catalogue.ops:
        wanted = op.op_type
        if op.op_type_renamed and op.op_type_renamed.torch_version <= TORCH:
            wanted = op.op_type_renamed.name
        assert wanted in op_types, (
            f"{op.name}: OpType::{wanted} is not in torch {torch.__version__}"
        )


def test_not_supported_entries_are_still_in_torch_or_explained(catalogue: Catalogue) -> None:
    """[not_supported] names no method this torch lacks, unless it only came later."""
    collectives = overridable_collectives()
    for name, reason in catalogue.not_supported.items():
        assert reason.strip(), f"{name} needs a reason"
        if name not in collectives:
            assert "torch 2.1" in reason or "torch 3" in reason, (
                f"{name} is not in torch {torch.__version__}; say in its reason which torch has it"
            )


def virtual_methods(name: str) -> set[str]:
    """The names of the virtual methods of a c10d header that return no Work."""
    return set(
        re.findall(r"virtual\s+(?!c10::intrusive_ptr<Work>\s)[^;{()]*?\b(\w+)\s*\(", header(name))
    )


def test_every_virtual_of_backend_and_work_is_overridden_or_a_default_with_a_reason(
    catalogue: Catalogue, render: Render
) -> None:
    """New virtuals (torch 2.15's isInitialized(), completion hooks...) are decided, not missed."""
    project = render("allops", ops="all").target
    sources = [project / "csrc" / "runtime" / "backend.hpp", project / "csrc" / "collectives.hpp"]
    text = re.sub(r"//[^\n]*", "", "\n".join(path.read_text() for path in sources))
    overrides = set(re.findall(r"\b(\w+)\([^;{]*\)\s*(?:const\s*)?override\b", text))
    theirs = {f"Backend::{n}" for n in virtual_methods("Backend.hpp") if not n.startswith("~")}
    theirs |= {f"Work::{n}" for n in virtual_methods("Work.hpp")}
    undecided = sorted(
        v for v in theirs if v.split("::")[1] not in overrides and v not in catalogue.defaults
    )
    assert not undecided, (
        f"torch {torch.__version__}'s c10d has virtual methods the generated backend neither "
        f"overrides nor lists in catalogue.toml's [defaults]: {undecided}. Override each in the "
        "template's runtime/backend.hpp (or collectives.hpp, for a collective), or list it with "
        "the reason c10d's default is right."
    )
    both = sorted(v for v in catalogue.defaults if v.split("::")[1] in overrides)
    assert not both, f"{both} are overridden: remove them from [defaults]"
    for name, reason in catalogue.defaults.items():
        assert reason.strip(), f"{name} needs a reason"
        if name not in theirs:
            assert re.search(r"torch \d+\.\d+", reason), (
                f"{name} is not in torch {torch.__version__}; say in its reason which torch has it"
            )


@pytest.mark.build
def test_the_backend_compiles_against_a_torch_without_the_supports_virtuals(
    render: Render, tmp_path: Path
) -> None:
    """PyTorch's main branch folds the supportsX() virtuals into one capabilities() set: against
    this torch's c10d headers with supportsSplitting() taken out, the backend still compiles
    (its override is there only where the compiler finds the virtual)."""
    from torch.utils import cpp_extension

    project = render("nosupports", ops="all").target
    future = tmp_path / "include" / "torch" / "csrc" / "distributed" / "c10d"
    future.mkdir(parents=True)
    backend_hpp = (C10D / "Backend.hpp").read_text()
    without, removed = re.subn(
        r"\n  virtual bool supportsSplitting\(\) const \{.*?\n  \}\n", "\n", backend_hpp, flags=re.S
    )
    assert removed == 1, "Backend.hpp's supportsSplitting() changed: update this test"
    (future / "Backend.hpp").write_text(without)
    probe = tmp_path / "probe.cpp"
    probe.write_text('#include "collectives.hpp"\n')
    includes = [tmp_path / "include", project / "csrc", *cpp_extension.include_paths()]
    command = [
        os.environ.get("CXX", "c++"), "-std=c++20", "-fsyntax-only", "-Wall", "-Werror",
        *(f"-I{path}" for path in includes), f"-I{sysconfig.get_paths()['include']}", str(probe),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
