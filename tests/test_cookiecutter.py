"""Plain cookiecutter renders what new-backend renders; its hook rejects what new-backend does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cookiecutter.exceptions import FailedHookException
from cookiecutter.main import cookiecutter
from helpers import TEMPLATE, listing, render_with_cli, tree

# (cookiecutter's key=value answers, the same project as new-backend arguments)
SAME_PROJECTS = {
    "one op": (["backend_name=x", "ops=allreduce"], ["x", "--ops", "allreduce"]),
    "aliases and devices": (
        ["backend_name=my_rdma", "ops=all_to_all_single,isend,irecv", "devices=cuda"],
        ["my_rdma", "--ops", "alltoall_base,send,recv", "--devices", "cuda"],
    ),
    "defaults": ([], []),
    "all ops": (["backend_name=every", "ops=all"], ["every", "--ops", "all"]),
}

BAD_ANSWERS = {
    "built-in name": ["backend_name=gloo"],
    "upper case": ["backend_name=Bad"],
    "keyword": ["backend_name=class"],
    "unknown op": ["backend_name=x", "ops=allreduc"],
    "duplicate op": ["backend_name=x", "ops=all_reduce,allreduce"],
    "not a device": ["backend_name=x", "devices=gpu"],
    "path": pytest.param(
        ["backend_name=a/b"],
        marks=pytest.mark.xfail(
            strict=True,
            reason="bug: cookiecutter creates a/b before the pre_gen hook rejects the name and "
            "removes only a/b, so an empty folder a/ is left",
        ),
    ),
}


def plain_cookiecutter(answers: list[str], cwd: Path, home: Path) -> subprocess.CompletedProcess:
    """``cookiecutter template/ --no-input ANSWERS`` in ``cwd``, with ``home`` as HOME."""
    env = {**os.environ, "HOME": str(home)}
    env.pop("COOKIECUTTER_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "cookiecutter", str(TEMPLATE), "--no-input", *answers],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def as_context(answers: list[str]) -> dict[str, str]:
    return dict(answer.split("=", 1) for answer in answers)


def test_plain_cookiecutter_renders_what_new_backend_renders(tmp_path: Path) -> None:
    answers, args = SAME_PROJECTS["one op"]
    (tmp_path / "home").mkdir()
    (tmp_path / "plain").mkdir()
    done = plain_cookiecutter(answers, tmp_path / "plain", tmp_path / "home")
    assert done.returncode == 0, done.stderr
    expected = render_with_cli(args, tmp_path / "cli")
    (rendered,) = (tmp_path / "plain").iterdir()
    assert rendered.name == expected.name
    assert tree(rendered) == tree(expected)


@pytest.mark.parametrize(("answers", "args"), SAME_PROJECTS.values(), ids=SAME_PROJECTS.keys())
def test_cookiecutter_api_renders_what_new_backend_renders(
    answers: list[str], args: list[str], tmp_path: Path, isolated: dict[str, Path]
) -> None:
    project = cookiecutter(
        str(TEMPLATE), no_input=True, extra_context=as_context(answers), output_dir=str(tmp_path)
    )
    assert tree(Path(project)) == tree(render_with_cli(args, tmp_path / "cli"))


def test_plain_cookiecutter_hook_rejects_a_builtin_name(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "plain").mkdir()
    done = plain_cookiecutter(["backend_name=gloo"], tmp_path / "plain", tmp_path / "home")
    assert done.returncode != 0
    assert "new-backend: invalid backend name: 'gloo'" in done.stderr  # the hook's message
    assert listing(tmp_path / "plain") == {}


@pytest.mark.parametrize("answers", BAD_ANSWERS.values(), ids=BAD_ANSWERS.keys())
def test_cookiecutter_api_hook_rejects_bad_answers(
    answers: list[str],
    tmp_path: Path,
    isolated: dict[str, Path],
    capfd: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(FailedHookException):
        cookiecutter(
            str(TEMPLATE), no_input=True, extra_context=as_context(answers), output_dir=str(out)
        )
    assert "new-backend: invalid" in capfd.readouterr().err  # the hook's own message
    assert listing(out) == {}
