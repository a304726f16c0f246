"""The new-backend command: every bad input is one line and writes nothing; good ones work."""

from __future__ import annotations

import json
import re
from pathlib import Path

import new_backend
import new_backend.generate
import pytest
from conftest import Cli
from cookiecutter.exceptions import CookiecutterException
from helpers import EXAMPLE_DUMMY, assert_one_line_error, listing, run_cli, tree
from new_backend.catalogue import Catalogue

BAD_NAMES = {
    "empty": "",
    "too long": "a" * 33,
    "upper case": "MyBackend",
    "leading digit": "1backend",
    "leading underscore": "_backend",
    "double underscore": "my__backend",
    "trailing underscore": "backend_",
    "dash": "my-backend",
    "space": "my backend",
    "non-ascii": "café",
    "python keyword": "class",
    "python keyword lambda": "lambda",
    "c++ keyword namespace": "namespace",
    "c++ keyword template": "template",
    "c++ keyword nullptr": "nullptr",
    "path": "a/b",
    "windows path": "a\\b",
    "parent": "..",
    "current": ".",
    **{
        f"built-in {name}": name
        for name in ("gloo", "nccl", "mpi", "ucc", "xccl", "fake", "undefined", "threaded")
    },
    **{f"device {name}": name for name in ("cuda", "cpu", "npu", "privateuseone")},
    "torch": "torch",
}

BAD_OPS = {
    "unknown": "nonsense",
    "typo": "allreduc",
    "duplicate": "allreduce,allreduce",
    "alias duplicate": "all_reduce,allreduce",
    "empty": "",
    "only commas": ",",
    "empty entry": "allreduce,,allgather",
    "trailing comma": "allreduce,",
    "all among others": "all,allreduce",
}

BAD_DEVICES = {
    "not a name": "cuda:0",
    "torch's own, not served": "xla",
    "not a device": "gpu",
    "two out-of-tree": "cpu,npu,tpu",
    "duplicate": "cpu,cpu",
    "duplicate in other case": "cpu,CPU",
    "empty": "",
    "empty entry": "cpu,,cuda",
    "typo of cuda": "cpu,cdua",
    "PrivateUse1 as spelled in C++": "cpu,PrivateUse1",
}


@pytest.fixture
def user_file(out: Path) -> Path:
    """Something of the user's already in the output folder, which must survive everything."""
    path = out / "notes.txt"
    path.write_text("mine\n")
    return path


def ops_of(result_stdout: str) -> list[str]:
    """The op names a ``Created``/``Would create`` report lists."""
    match = re.search(r"ops (.*?); devices", result_stdout)
    assert match, result_stdout
    return match.group(1).split(", ")


# -- bad input: exit 2, one line, nothing written -------------------------------


@pytest.mark.parametrize("name", BAD_NAMES.values(), ids=BAD_NAMES.keys())
@pytest.mark.parametrize("dry_run", [False, True], ids=["write", "dry-run"])
def test_bad_name_is_one_line_usage_error_and_writes_nothing(
    run: Cli, out: Path, user_file: Path, name: str, dry_run: bool
) -> None:
    before = listing(out)
    result = run("--dry-run", "--", name) if dry_run else run("--", name)
    line = assert_one_line_error(result, 2)
    assert "NAME" in line
    assert listing(out) == before


@pytest.mark.parametrize("ops", BAD_OPS.values(), ids=BAD_OPS.keys())
def test_bad_ops_are_one_line_usage_error_and_write_nothing(
    run: Cli, out: Path, user_file: Path, ops: str
) -> None:
    before = listing(out)
    line = assert_one_line_error(run("x", f"--ops={ops}"), 2)
    assert "--ops" in line
    assert listing(out) == before


@pytest.mark.parametrize("devices", BAD_DEVICES.values(), ids=BAD_DEVICES.keys())
def test_bad_devices_are_one_line_usage_error_and_write_nothing(
    run: Cli, out: Path, user_file: Path, devices: str
) -> None:
    before = listing(out)
    line = assert_one_line_error(run("x", f"--devices={devices}"), 2)
    assert "--devices" in line
    assert listing(out) == before


def test_bad_impl_is_one_line_usage_error(run: Cli, out: Path, user_file: Path) -> None:
    before = listing(out)
    assert_one_line_error(run("x", "--impl", "nonsense"), 2)
    assert listing(out) == before


BAD_LIBRARIES = {
    "space": "lib ucx",
    "path": "../ucx",
    "leading dash": "-lucx",
    "shell": "ucx;rm",
    "too long": "u" * 101,
}


@pytest.mark.parametrize("library", BAD_LIBRARIES.values(), ids=BAD_LIBRARIES.keys())
def test_bad_library_is_one_line_usage_error(
    run: Cli, out: Path, user_file: Path, library: str
) -> None:
    before = listing(out)
    line = assert_one_line_error(run("x", f"--library={library}"), 2)
    assert "--library" in line and "pkg-config" in line
    assert listing(out) == before


def test_library_is_recorded_and_kept_by_re_rendering(run: Cli, out: Path) -> None:
    """--library lands in .new-backend.json and setup.py; --force and --from-answers keep it."""
    assert run("alpha", "--library", "ucx").exit_code == 0
    answers = json.loads((out / "alpha" / ".new-backend.json").read_text())
    assert answers["library"] == "ucx"
    setup = (out / "alpha" / "setup.py").read_text()
    assert "def find_library(wanted: Wanted)" in setup and 'Wanted(\n        "ucx",' in setup
    assert "UCX_HOME" in setup and "-Wl,-rpath," in setup and "$ORIGIN/" in setup
    original = tree(out / "alpha")
    result = run("--force", "-o", str(out / "alpha"))
    assert result.exit_code == 0, result.output
    assert tree(out / "alpha") == original
    (out / "again").mkdir()
    result = run("--from-answers", str(out / "alpha" / ".new-backend.json"), "-o", "again")
    assert result.exit_code == 0, result.output
    assert tree(out / "again" / "alpha") == original
    assert run("beta").exit_code == 0
    plain = out / "beta"
    assert "library" not in json.loads((plain / ".new-backend.json").read_text())
    assert "find_library" not in (plain / "setup.py").read_text()


def test_unknown_option_is_one_line_usage_error(run: Cli, out: Path, user_file: Path) -> None:
    before = listing(out)
    assert_one_line_error(run("x", "--bogus"), 2)
    assert listing(out) == before


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("allreduc", "allreduce"), ("alltoal", "alltoall"), ("brodcast", "broadcast")],
)
def test_unknown_op_suggests_a_close_match(run: Cli, typo: str, meant: str) -> None:
    line = assert_one_line_error(run("x", "--ops", typo), 2)
    assert re.search(rf"did you mean .*\b{meant}\b", line), line


@pytest.mark.parametrize(
    ("devices", "meant"),
    [("cpu,cdua", "cuda"), ("cdua", "cuda"), ("cpu,cud", "cuda"), ("xpuu", "xpu")],
)
def test_a_mistyped_device_suggests_torch_s_name(run: Cli, devices: str, meant: str) -> None:
    line = assert_one_line_error(run("x", "--devices", devices), 2)
    assert f"did you mean {meant}?" in line, line


def test_private_use_one_is_named_as_torch_names_it(run: Cli) -> None:
    line = assert_one_line_error(run("x", "--devices", "cpu,PrivateUse1"), 2)
    assert "privateuseone" in line, line


@pytest.mark.parametrize("devices", ["cpu,npu", "hpu", "cpu,xpu", "cpu,cudax2"])
def test_devices_one_letter_apart_are_not_typos(run: Cli, devices: str) -> None:
    """npu, hpu and xpu are all real devices: a changed letter is no typo."""
    assert run("x", "--devices", devices, "--dry-run").exit_code == 0


@pytest.mark.parametrize(
    ("name", "why"), [("cuda", "device type"), ("npu", "device type"), ("torch", "TORCH_*")]
)
def test_a_name_that_is_a_device_or_torch_s_own_says_why(run: Cli, name: str, why: str) -> None:
    line = assert_one_line_error(run(name), 2)
    assert why in line, line


def test_all_among_other_ops_says_to_give_it_alone(run: Cli) -> None:
    line = assert_one_line_error(run("x", "--ops", "all,broadcast"), 2)
    assert "'all' already selects every op" in line and "unknown op" not in line, line


def test_duplicate_alias_names_both_spellings(run: Cli) -> None:
    line = assert_one_line_error(run("x", "--ops", "all_reduce,allreduce"), 2)
    assert "'allreduce'" in line and "'all_reduce'" in line and "twice" in line


def test_error_messages_are_one_line_even_for_multiline_input(run: Cli) -> None:
    assert_one_line_error(run("--", "a\nb"), 2)
    assert_one_line_error(run("x", "--ops", "allreduce\n,\nnope"), 2)


# -- names, ops and devices that are accepted -------------------------------------


@pytest.mark.parametrize("name", ["a", "a" * 32, "a1_b2_c3"])
def test_good_names_are_accepted(run: Cli, name: str) -> None:
    result = run(name, "--dry-run")
    assert result.exit_code == 0, result.output
    assert f"src/{name}_collectives/__init__.py" in result.stdout


def test_aliases_map_to_catalogue_names(run: Cli) -> None:
    """torch.distributed's names, any case, dashes or spaces: the c10d names, catalogue order."""
    aliases = "all_gather_into_tensor, ALL-TO-ALL-SINGLE,reduce_scatter_tensor,all_reduce"
    result = run("x", "--ops", aliases, "--dry-run")
    assert result.exit_code == 0, result.output
    assert ops_of(result.stdout) == [
        "allreduce",
        "_allgather_base",
        "_reduce_scatter_base",
        "alltoall_base",
    ]


def test_every_alias_in_the_catalogue_resolves_to_its_op(run: Cli, catalogue: Catalogue) -> None:
    """One alias per op, given in reverse order, selects every op in catalogue order."""
    spellings = [op.aliases[-1] if op.aliases else op.name for op in reversed(catalogue.ops)]
    result = run("x", "--ops", ",".join(spellings), "--dry-run")
    assert result.exit_code == 0, result.output
    assert ops_of(result.stdout) == list(catalogue.names)


@pytest.mark.parametrize("spelling", ["all", "ALL"])
def test_ops_all_selects_every_catalogue_op(
    run: Cli, out: Path, catalogue: Catalogue, spelling: str
) -> None:
    result = run("x", "--ops", spelling)
    assert result.exit_code == 0, result.output
    answers = json.loads((out / "x" / ".new-backend.json").read_text())
    assert answers["ops"] == list(catalogue.names)


def test_an_out_of_tree_device_is_served_by_name(run: Cli, out: Path) -> None:
    """``--devices npu,cpu``: a PrivateUse1 device by the name its package gives it, last."""
    result = run("x", "--devices", "npu,cpu")
    assert result.exit_code == 0, result.output
    project = out / "x"
    assert json.loads((project / ".new-backend.json").read_text())["devices"] == ["cpu", "npu"]
    init = (project / "src" / "x_collectives" / "__init__.py").read_text()
    assert 'DEVICES = ["cpu", "npu"]' in init
    config = (project / "csrc" / "config.hpp").read_text()
    assert "kDevices[] = {c10::DeviceType::CPU, c10::DeviceType::PrivateUse1};" in config, config
    assert '#define NEW_BACKEND_DEVICES "cpu and npu"' in config, config
    assert 'FAKE_DEVICE = "npu"' in (project / "tests" / "harness.py").read_text()


def test_devices_are_normalised(run: Cli, out: Path) -> None:
    result = run("x", "--devices", "CUDA, cpu")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "x" / ".new-backend.json").read_text())["devices"] == ["cpu", "cuda"]


# -- what is written, and where ----------------------------------------------------


def test_no_arguments_writes_the_dummy_example_and_nothing_else(
    run: Cli, out: Path, isolated: dict[str, Path]
) -> None:
    result = run()
    assert result.exit_code == 0, result.output
    assert "Created dummy" in result.stdout
    assert [p.name for p in out.iterdir()] == ["dummy"]  # no staging folder left behind
    assert tree(out / "dummy") == tree(EXAMPLE_DUMMY)
    assert listing(isolated["home"]) == {}  # no cookiecutter replay file or cache in HOME


@pytest.mark.parametrize("args", [(), ("--dry-run",)], ids=["write", "dry-run"])
def test_nothing_is_left_in_the_temp_folder(
    run: Cli, isolated: dict[str, Path], args: tuple[str, ...]
) -> None:
    assert run(*args).exit_code == 0
    assert listing(isolated["tmp"]) == {}


def test_output_dir_option_puts_the_project_in_that_folder(run: Cli, out: Path) -> None:
    (out / "a" / "b" / "c").mkdir(parents=True)
    result = run("x", "-o", "a/b/c")
    assert result.exit_code == 0, result.output
    assert (out / "a" / "b" / "c" / "x" / ".new-backend.json").is_file()
    assert [p.name for p in (out / "a" / "b" / "c").iterdir()] == ["x"]


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)])
def test_a_missing_output_dir_is_refused_not_created(
    run: Cli, out: Path, dry_run: tuple[str, ...]
) -> None:
    """A typo in -o must not create a tree of folders."""
    before = listing(out)
    line = assert_one_line_error(run("x", "-o", "a/b/c", *dry_run), 2)
    assert "a/b/c does not exist" in line
    assert listing(out) == before


@pytest.mark.parametrize("where", ["/proc", "/sys/kernel"])
def test_a_folder_that_refuses_files_says_it_cannot_be_written(run: Cli, where: str) -> None:
    """/proc answers ENOENT to mkdir: the message must not say "No such file"."""
    if not Path(where).is_dir():
        pytest.skip(f"{where} does not exist here")
    line = assert_one_line_error(run("foo", "-o", where), 2)
    assert f"the folder {where} cannot be written" in line
    assert "No such file" not in line


@pytest.mark.parametrize(
    ("args", "cwd"),
    [
        (("other",), "proj"),
        (("--", "update"), "proj"),
        (("other",), "proj/csrc"),
        ((), "proj/csrc"),
        (("proj", "--force"), "proj/tests"),
        (("other", "--dry-run"), "proj"),
        (("other", "-o", "csrc"), "proj"),
        (("other", "-o", "proj/src"), "."),
    ],
)
def test_no_project_is_nested_in_a_project(
    run: Cli, out: Path, args: tuple[str, ...], cwd: str
) -> None:
    """Inside a project (or below one), another render would nest: one line, nothing written."""
    assert run("proj").exit_code == 0
    before = listing(out)
    result = run_cli(args, cwd=out / cwd)
    line = assert_one_line_error(result, 2)
    assert f"inside the project {out.resolve() / 'proj'}" in line
    assert "new-backend update" in line and "-o" in line
    assert listing(out) == before


def test_a_project_can_be_made_from_inside_another_with_o_outside_it(run: Cli, out: Path) -> None:
    assert run("proj").exit_code == 0
    result = run_cli(["other", "-o", "../.."], cwd=out / "proj" / "csrc")
    assert result.exit_code == 0, result.output
    assert (out / "other" / ".new-backend.json").is_file()
    assert not (out / "proj" / "other").exists() and not (out / "proj" / "csrc" / "other").exists()


def test_existing_target_without_force_is_refused(run: Cli, out: Path) -> None:
    target = out / "dummy"
    target.mkdir()
    (target / "work.cpp").write_text("// my work\n")
    before = listing(out)
    line = assert_one_line_error(run(), 2)  # bad input, as the README promises
    assert "--force" in line
    assert listing(out) == before
    assert_one_line_error(run("--dry-run"), 2)
    assert listing(out) == before


@pytest.fixture
def user_project(out: Path) -> dict[str, bytes]:
    """out/dummy holds the user's work (text, binary, a dotfile, a subfolder)."""
    target = out / "dummy"
    (target / "csrc").mkdir(parents=True)
    (target / "csrc" / "ops.cpp").write_text("// months of work\n")
    (target / ".env").write_text("SECRET=1\n")
    (target / "data.bin").write_bytes(bytes(range(256)))
    return tree(target)


def test_force_moves_the_existing_project_to_a_backup(
    run: Cli, out: Path, user_project: dict[str, bytes]
) -> None:
    result = run("--force")
    assert result.exit_code == 0, result.output
    match = re.search(r"Moved the existing \S+ to (\S+)", result.stdout)
    assert match, result.stdout
    backup = out / Path(match.group(1)).name
    assert backup.parent == out and backup.name.startswith("dummy.backup-")
    assert tree(backup) == user_project
    assert tree(out / "dummy") == tree(EXAMPLE_DUMMY)
    assert sorted(p.name for p in out.iterdir()) == sorted(["dummy", backup.name])


def test_force_twice_keeps_both_backups(
    run: Cli, out: Path, user_project: dict[str, bytes]
) -> None:
    assert run("--force").exit_code == 0
    assert run("--force").exit_code == 0
    backups = sorted(p for p in out.iterdir() if p.name != "dummy")
    assert len(backups) == 2, backups
    assert user_project in [tree(b) for b in backups]  # the first backup is the user's work
    assert tree(out / "dummy") == tree(EXAMPLE_DUMMY)


def test_dry_run_with_force_touches_nothing(
    run: Cli, out: Path, user_project: dict[str, bytes]
) -> None:
    before = listing(out)
    result = run("--force", "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Would create dummy")
    assert listing(out) == before


def test_force_replaces_a_file_in_the_way(run: Cli, out: Path) -> None:
    (out / "dummy").write_text("not a folder\n")
    result = run("--force")
    assert result.exit_code == 0, result.output
    backups = [p for p in out.iterdir() if p.name.startswith("dummy.backup-")]
    assert len(backups) == 1 and backups[0].read_text() == "not a folder\n"


def test_dry_run_lists_every_file_and_writes_nothing(run: Cli, out: Path, user_file: Path) -> None:
    (out / "not" / "yet").mkdir(parents=True)
    before = listing(out)
    result = run("x", "--ops", "all", "--dry-run", "-o", "not/yet")
    assert result.exit_code == 0, result.output
    assert listing(out) == before
    listed = [line.strip() for line in result.stdout.splitlines()[1:]]
    assert f"with {len(listed)} files" in result.stdout.splitlines()[0]
    assert run("x", "--ops", "all").exit_code == 0
    assert listed == sorted(tree(out / "x"))


# -- --from-answers ------------------------------------------------------------------


def test_from_answers_re_renders_an_identical_project(run: Cli, out: Path, tmp_path: Path) -> None:
    assert run("alpha", "--ops", "send,recv,all_reduce", "--devices", "cpu").exit_code == 0
    original = tree(out / "alpha")
    answers = tmp_path / "answers.json"
    answers.write_bytes(original[".new-backend.json"])
    (out / "again").mkdir()
    result = run("--from-answers", str(answers), "-o", "again")
    assert result.exit_code == 0, result.output
    assert tree(out / "again" / "alpha") == original


def test_options_override_the_answers_file(run: Cli, out: Path, tmp_path: Path) -> None:
    assert run("alpha", "--ops", "send,recv", "--devices", "cpu").exit_code == 0
    answers = out / "alpha" / ".new-backend.json"
    (out / "x").mkdir()
    (out / "y").mkdir()
    result = run("beta", "--from-answers", str(answers), "--devices", "cuda", "-o", "x")
    assert result.exit_code == 0, result.output
    direct = run("beta", "--ops", "send,recv", "--devices", "cuda", "-o", "y")
    assert direct.exit_code == 0, direct.output
    assert tree(out / "x" / "beta") == tree(out / "y" / "beta")


@pytest.mark.parametrize("library", [(), ("--library", "foo")])
def test_the_command_in_the_generated_readme_re_renders_the_project(
    run: Cli, out: Path, library: tuple[str, ...]
) -> None:
    args = ["my_rdma", "--ops", "reduce_scatter_tensor,irecv,isend", "--devices", "cuda", *library]
    (out / "first").mkdir()
    (out / "again").mkdir()
    assert run(*args, "-o", "first").exit_code == 0
    original = tree(out / "first" / "my_rdma")
    readme = original["README.md"].decode()
    (command,) = [
        line.split()
        for line in readme.splitlines()
        if line.strip().startswith("new-backend my_rdma ")
    ]
    result = run(*command[1:], "-o", "again")
    assert result.exit_code == 0, result.output
    assert tree(out / "again" / "my_rdma") == original


GOOD_ANSWERS = {"backend_name": "x", "ops": ["allreduce"], "devices": ["cpu"], "impl": "dummy"}


def answers_with(**changes: object) -> str:
    """A JSON answers file: GOOD_ANSWERS with some values changed."""
    return json.dumps({**GOOD_ANSWERS, **changes})


BROKEN_ANSWERS = {
    "not json": "{not json",
    "a list": "[]",
    "missing keys": '{"backend_name": "x"}',
    "bad name": answers_with(backend_name="gloo"),
    "bad op": answers_with(ops=["nope"]),
    "bad device": answers_with(devices=["gpu"]),
    "bad impl": answers_with(impl="real"),
    "bad library": answers_with(library="lib ucx"),
    "name not a string": answers_with(backend_name=7),
    "ops not a list": answers_with(ops=5),
    "op not a string": answers_with(ops=[1]),
    "devices null": answers_with(devices=None),
    "not utf-8": b"\xff\xfe{}",
}


@pytest.mark.parametrize("content", BROKEN_ANSWERS.values(), ids=BROKEN_ANSWERS.keys())
def test_broken_answers_file_is_one_line_error(
    run: Cli, out: Path, tmp_path: Path, content: str | bytes
) -> None:
    answers = tmp_path / "answers.json"
    if isinstance(content, bytes):
        answers.write_bytes(content)
    else:
        answers.write_text(content)
    before = listing(out)
    line = assert_one_line_error(run("--from-answers", str(answers)), 2)
    assert "answers.json" in line
    assert listing(out) == before


def test_missing_answers_file_is_one_line_error(run: Cli, out: Path, tmp_path: Path) -> None:
    assert_one_line_error(run("--from-answers", str(tmp_path / "nope.json")), 2)
    assert_one_line_error(run("--from-answers", str(tmp_path)), 2)  # a folder
    assert listing(out) == {}


# -- other options ------------------------------------------------------------------


def test_list_ops_lists_every_catalogue_op(run: Cli, out: Path, catalogue: Catalogue) -> None:
    result = run("--list-ops")
    assert result.exit_code == 0, result.output
    names = [line.split()[0] for line in result.stdout.splitlines() if not line[:1].isspace()]
    assert names == list(catalogue.names)
    for op in catalogue.ops:
        assert all(alias in result.stdout for alias in op.aliases)
    assert listing(out) == {}


def test_version(run: Cli) -> None:
    result = run("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"new-backend, version {new_backend.__version__}"


def test_help_mentions_every_option(run: Cli) -> None:
    result = run("--help")
    assert result.exit_code == 0
    options = "--ops --devices --impl --output-dir --force --dry-run --from-answers --list-ops"
    for option in [*options.split(), "--version"]:
        assert option in result.stdout


def test_output_dir_that_is_a_file_is_one_line_error(run: Cli, out: Path, user_file: Path) -> None:
    before = listing(out)
    assert_one_line_error(run("x", "-o", user_file.name), 2)
    assert_one_line_error(run("x", "-o", f"{user_file.name}/sub"), 2)
    assert_one_line_error(run("x", "-o", f"{user_file.name}/sub", "--dry-run"), 2)
    assert listing(out) == before


# -- failures while rendering leave nothing behind -------------------------------


def _raise_at_once(*args: object, **kwargs: object) -> str:
    raise CookiecutterException("simulated template failure")


def _raise_after_writing(real):  # type: ignore[no-untyped-def]
    def fake(*args: object, **kwargs: object) -> str:
        real(*args, **kwargs)  # the staging folder now holds a whole project
        raise CookiecutterException("simulated template failure")

    return fake


@pytest.mark.parametrize("when", ["at once", "after writing"])
@pytest.mark.parametrize("force", [False, True], ids=["new", "force"])
def test_template_failure_leaves_the_output_folder_unchanged(
    run: Cli,
    out: Path,
    user_project: dict[str, bytes],
    monkeypatch: pytest.MonkeyPatch,
    when: str,
    force: bool,
) -> None:
    real = new_backend.generate.cookiecutter
    fake = _raise_at_once if when == "at once" else _raise_after_writing(real)
    monkeypatch.setattr(new_backend.generate, "cookiecutter", fake)
    before = listing(out)
    args = ["other"] if not force else ["--force"]
    line = assert_one_line_error(run(*args), 1)
    assert "simulated template failure" in line
    assert listing(out) == before  # no staging folder, no backup, the user's project intact


@pytest.mark.parametrize("impl", ["dummy", "store", "mpi"])
def test_a_library_project_says_how_to_point_the_build_at_it(
    run: Cli, out: Path, impl: str
) -> None:
    """--library foo: the README's "Generated by" line and Build section, and the printed
    next steps, name foo and FOO_HOME, FOO_INCLUDE_DIR/FOO_LIBRARY_DIR and PKG_CONFIG_PATH."""
    result = run("mine", "--impl", impl, "--library", "foo")
    assert result.exit_code == 0, result.output
    next_steps = result.stdout.split("Next:\n")[1]
    for word in ("foo", "FOO_HOME", "FOO_INCLUDE_DIR", "FOO_LIBRARY_DIR", "PKG_CONFIG_PATH"):
        assert word in next_steps, next_steps
    assert "library foo" in result.stdout.splitlines()[0]
    readme = (out / "mine" / "README.md").read_text()
    intro, build = readme.split("\n## Build\n")[0], readme.split("\n## Build\n")[1]
    assert "--devices cpu,cuda --library foo\n" in intro
    build = build.split("\n## ")[0]
    for word in ("`foo`", "FOO_HOME=", "FOO_INCLUDE_DIR=", "FOO_LIBRARY_DIR=", "PKG_CONFIG_PATH="):
        assert word in build, word
    assert run("plain").exit_code == 0
    assert "--library" not in (out / "plain" / "README.md").read_text()


def test_ops_hpp_says_the_op_bodies_get_non_contiguous_tensors(run: Cli, out: Path) -> None:
    """Contiguity is not checked, so the contract in ops.hpp says so, and what to do about
    it, and the op declarations point there."""
    assert run("mine", "--ops", "all").exit_code == 0
    hpp = (out / "mine" / "csrc" / "ops.hpp").read_text()
    contract = " ".join(
        hpp.split("\n// Arguments.")[1].split("\n//\n")[0].replace("//", "").split()
    )
    for words in ("Contiguity is not checked", "input or output", "non-contiguous view",
                  "tensor.contiguous()", "copy_() it back"):  # fmt: skip
        assert words in contract, contract
    blocks = hpp.split("void abort(Communicator& comm);\n\n")[1].split("\n\n")
    assert blocks[0].startswith("// The ops. Every tensor they receive may be non-contiguous")
    assert blocks[1].startswith("// ")  # each op keeps its own comment


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_signal_at_any_moment_leaves_no_staging_folder_and_no_traceback(
    tmp_path: Path, signal_name: str
) -> None:
    """SIGTERM or Ctrl-C while the command imports, renders or renames: one line, nothing left.

    The project is either whole (the signal came after the rename) or absent.
    """
    import signal
    import subprocess
    import sys
    import time

    number = getattr(signal, signal_name)
    for delay in (0.15, 0.3, 0.45, 0.6, 0.8, 1.0):
        out = tmp_path / f"out-{delay}"
        out.mkdir()
        process = subprocess.Popen(
            [sys.executable, "-m", "new_backend", "x"], cwd=out,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        time.sleep(delay)
        process.send_signal(number)
        _, stderr = process.communicate(timeout=60)
        left = sorted(p.name for p in out.iterdir())
        assert left in ([], ["x"]), f"{signal_name} after {delay} s left {left}"
        assert "Traceback" not in stderr, stderr
        if left:  # done before the signal came; it may still end the exiting interpreter
            assert process.returncode in (0, -number, 128 + number), (process.returncode, stderr)
            assert (out / "x" / ".new-backend.json").is_file(), "a partial project"
        else:
            assert process.returncode in (-number, 128 + number), (process.returncode, stderr)
            lines = [line for line in stderr.splitlines() if line]
            assert lines in ([], ["Error: terminated"], ["Error: interrupted"]), stderr


def test_a_full_disk_names_the_folder(
    run: Cli, out: Path, user_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ENOSPC carries no file name: the error names the output folder, and nothing is left."""
    import errno

    def full(*args: object, **kwargs: object) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(new_backend.generate, "cookiecutter", full)
    before = listing(out)
    line = assert_one_line_error(run("x"), 1)
    assert line == f"Error: writing the project into {out}: No space left on device", line
    assert listing(out) == before
