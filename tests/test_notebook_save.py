"""The kit's notebooks saved by JupyterLab as git stores them, so `git status` tells the truth after use."""
from __future__ import annotations

import subprocess

import pytest

from dspark_lab.cli import launch, notebook_save
from helpers import NOTEBOOKS_DIR, checkout_with_the_notebook_filter, what_git_commits

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbstripout")
filemanager = pytest.importorskip("jupyter_server.services.contents.filemanager")

NB = NOTEBOOKS_DIR / "01_onboarding.ipynb"


def _used(nb):
    """The notebook as a session leaves it: outputs, counts and the metadata Jupyter adds."""
    for n, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        cell.execution_count = n + 1
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=f"line {n}\n")]
        cell.metadata["scrolled"] = True
    nb.metadata["language_info"] = {"name": "python", "version": "3.12.0"}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    return nb


def _git(root, *args) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout


def _manager(root, *, hook: bool):
    """A contents manager configured as lab.sh's command line configures JupyterLab's."""
    from traitlets.config import Config

    config = Config()
    if hook:
        option, value = launch.SAVE_ARGS[0].removeprefix("--").split("=", 1)
        cls, trait = option.split(".")
        config[cls][trait] = value  # an importable name: the server imports it
    return filemanager.FileContentsManager(config=config, root_dir=str(root))


def _committed_checkout(tmp_path):
    root = checkout_with_the_notebook_filter(tmp_path)
    (root / "notebooks" / NB.name).write_text(NB.read_text())
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "committed notebook")
    return root


@pytest.mark.parametrize("hook", [True, False], ids=["saved-by-the-kit", "saved-as-jupyter-does"])
def test_a_used_notebook_saved_leaves_git_status_clean_only_with_the_kit_hook(tmp_path, hook):
    root = _committed_checkout(tmp_path)
    model = {"type": "notebook", "format": "json", "content": _used(nbformat.read(NB, as_version=4))}
    _manager(root, hook=hook).save(model, f"notebooks/{NB.name}")
    status = _git(root, "status", "--porcelain")
    if hook:
        assert status == "", status
        saved = root / "notebooks" / NB.name
        assert saved.read_text() == what_git_commits(saved)  # byte for byte what the git filter stores
    else:  # the defect the hook removes: git reports the size change without running the filter
        assert f"notebooks/{NB.name}" in status
        assert _git(root, "diff", "--stat") == ""
        _git(root, "add", "notebooks")  # the README's remedy: stages nothing, and status is clean again
        assert _git(root, "status", "--porcelain") == "" and _git(root, "diff", "--cached", "--stat") == ""


def test_only_the_kit_notebooks_are_stripped(tmp_path):
    root = _committed_checkout(tmp_path)
    (root / "mine").mkdir()
    model = {"type": "notebook", "format": "json", "content": _used(nbformat.read(NB, as_version=4))}
    _manager(root, hook=True).save(model, "mine/analysis.ipynb")
    kept = nbformat.read(root / "mine" / "analysis.ipynb", as_version=4)
    assert any(c.outputs for c in kept.cells if c.cell_type == "code")


@pytest.mark.parametrize("path,kit", [("notebooks/01_onboarding.ipynb", True), ("/notebooks/x.ipynb", True),
                                      ("notebooks/sub/x.ipynb", False), ("mine/notebooks.ipynb", False),
                                      ("notebooks/notes.txt", False), ("x.ipynb", False)])
def test_which_paths_are_kit_notebooks(path, kit):
    assert notebook_save.is_kit_notebook(path) is kit


def test_a_file_model_or_a_model_without_content_is_left_alone():
    text = {"type": "file", "format": "text", "content": "x"}
    notebook_save.strip_before_save(text, "notebooks/a.ipynb")
    assert text["content"] == "x"
    bare = {"type": "notebook", "content": None}
    notebook_save.strip_before_save(bare, "notebooks/a.ipynb")
    assert bare["content"] is None


def test_lab_sh_starts_jupyterlab_with_the_hook():
    argv = launch.jupyter_argv("py", port=8123, token="abc", as_root=False)
    assert set(launch.SAVE_ARGS) <= set(argv)
