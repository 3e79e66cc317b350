"""`dspark-lab lint` as a command and as the pre-commit hook: exit statuses (0 clean, 1 findings,
2 bad input), the by-design lines, and the hook of .pre-commit-hooks.yaml run the way pre-commit runs
it (its entry, with the staged Python files' names as arguments, in the repository's root) on a
throwaway git repository."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dspark_lab.cli import main as cli

ROOT = Path(__file__).resolve().parents[1]
SYNCS = "import torch\n\ndef step(x):\n    return x.sum().item()\n"
CLEAN = "import torch\n\ndef step(x):\n    return x.sum()\n"
BY_DESIGN = "import torch\n\ndef step(x):\n    return x.sum().item()  # sync-ok: the caller needs the number\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_exit_1_on_findings_with_file_line_and_fix(tmp_path, capsys):
    assert cli.main(["lint", str(write(tmp_path, "a.py", SYNCS))]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path / 'a.py'}:4:12: item:" in out and "fix:" in out


def test_exit_0_when_clean_or_every_sync_is_by_design(tmp_path, capsys):
    assert cli.main(["lint", str(write(tmp_path, "a.py", CLEAN)), str(write(tmp_path, "b.py", BY_DESIGN))]) == 0
    assert cli.main(["lint", "--show-exempt", str(tmp_path / "b.py")]) == 0
    assert "by design (item): the caller needs the number" in capsys.readouterr().out


def test_exit_2_on_a_missing_path_and_on_a_file_that_does_not_parse(tmp_path, capsys):
    assert cli.main(["lint", str(tmp_path / "missing.py")]) == 2
    assert "missing.py: no such file or folder" in capsys.readouterr().err
    assert cli.main(["lint", str(write(tmp_path, "bad.py", "def f(:\n"))]) == 2
    assert "bad.py:1: cannot lint a file that does not parse" in capsys.readouterr().err


def test_a_folder_is_linted_recursively_and_json_lists_exempt_lines_too(tmp_path, capsys):
    (tmp_path / "pkg").mkdir()
    write(tmp_path / "pkg", "a.py", SYNCS)
    write(tmp_path / "pkg", "b.py", BY_DESIGN)
    (tmp_path / "pkg" / ".venv").mkdir()
    write(tmp_path / "pkg" / ".venv", "c.py", SYNCS)  # a virtual environment is not the project's code
    assert cli.main(["lint", "--json", str(tmp_path / "pkg")]) == 1
    got = json.loads(capsys.readouterr().out)
    assert [(Path(f["path"]).name, f["rule"], f["exempt_reason"]) for f in got] == [
        ("a.py", "item", ""), ("b.py", "item", "the caller needs the number")]


# --- the pre-commit hook ---------------------------------------------------------------------
def hook() -> dict:
    [h] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    return h


def project_table() -> dict:
    return __import__("tomllib" if sys.version_info >= (3, 11) else "tomli").loads(
        (ROOT / "pyproject.toml").read_text())["project"]


def test_the_hook_is_declared_as_the_ecosystem_expects():
    h = hook()
    assert (h["id"], h["language"], h["types"], h["entry"]) == ("dspark-lab-lint", "python", ["python"], "dspark-lab-lint")
    # The entry's program is this project's torch-free console script.
    assert project_table()["scripts"][shlex.split(h["entry"])[0]] == "dspark_lab.lint.command:main"


def test_the_hook_s_environment_installs_no_torch():
    """pre-commit installs the repository bare (`pip install .`): its dependencies are the hook's
    environment, and torch (a CUDA build, several GB) must not be among them."""
    project = project_table()
    heavy = ("torch", "numpy", "pandas", "plotly", "pyarrow")
    assert [d for d in project["dependencies"] if d.split(">")[0].split("=")[0].strip().lower() in heavy] == []
    assert all(any(d.startswith(h) for d in project["optional-dependencies"]["kit"]) for h in heavy)


def test_the_hook_s_entry_lints_with_torch_numpy_and_pandas_unimportable(tmp_path):
    write(tmp_path, "step.py", SYNCS)
    module, func = project_table()["scripts"][hook()["entry"]].split(":")
    code = ("import sys; sys.modules.update(torch=None, numpy=None, pandas=None); "
            f"from {module} import {func}; sys.exit({func}(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "step.py"], cwd=tmp_path, env={"PYTHONPATH": str(ROOT)},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "step.py:4:12: item:" in r.stdout, r.stdout + r.stderr
    loaded = subprocess.run([sys.executable, "-c", f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"],
                            env={"PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120).stdout
    assert not [m for m in json.loads(loaded) if m.split(".")[0] in ("torch", "numpy", "pandas")]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def run_hook(repo: Path) -> subprocess.CompletedProcess:
    """What pre-commit does for a `language: python`, `types: [python]` hook: the staged files of that
    type, passed as arguments to the entry, run in the repository's root."""
    staged = [f for f in git(repo, "diff", "--cached", "--name-only").split() if f.endswith(".py")]
    console_script, *args = shlex.split(hook()["entry"])
    module, func = project_table()["scripts"][console_script].split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}(sys.argv[1:]))"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", code, *args, *staged], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q")
    git(r, "config", "user.email", "t@example.com")
    git(r, "config", "user.name", "t")
    return r


def test_the_hook_fails_a_commit_that_adds_a_sync_and_passes_once_it_is_fixed_or_reasoned(repo):
    write(repo, "step.py", SYNCS)
    write(repo, "notes.txt", "x.item() is not Python")  # not of the hook's type: never passed
    git(repo, "add", "step.py", "notes.txt")
    r = run_hook(repo)
    assert r.returncode == 1 and "step.py:4:12: item:" in r.stdout and "notes.txt" not in r.stdout
    write(repo, "step.py", BY_DESIGN)
    git(repo, "add", "step.py")
    assert run_hook(repo).returncode == 0
    write(repo, "step.py", SYNCS.replace(".item()", ".item()  # sync-ok"))
    git(repo, "add", "step.py")
    r = run_hook(repo)
    assert r.returncode == 1 and "sync_ok_without_reason" in r.stdout


def test_inspect_lint_puts_the_findings_beside_the_runtime_sites_in_the_record_and_the_report(tmp_path, capsys):
    target = tmp_path / "mystep.py"
    target.write_text("import torch\n\nx = torch.ones(4, device='cuda' if torch.cuda.is_available() else 'cpu')\n\n\n"
                      "def step():\n    return x.sum().item()\n")
    status = cli.main(["inspect", f"{target}:step", "--lint", "--steps", "2", "--trials", "1", "--warmup", "0",
                       "--out", str(tmp_path / "out"), "--name", "rec"])
    assert status == 0
    out = capsys.readouterr().out
    assert "lint beside the runtime" in out and "mystep.py:7 step [item]" in out
    rec = json.loads((tmp_path / "out" / "rec.json").read_text())
    [row] = rec["lint"]
    # Without CUDA no runtime site exists: the line is the static witness's alone, and says why.
    assert (row["rule"], row["found_by"]) == ("item", "static") and row["why_only_one"]
