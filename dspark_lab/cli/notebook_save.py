"""The kit's notebooks saved as git stores them: JupyterLab (started by lab.sh) writes a kit notebook
without its outputs and execution counts, through the same filter git's clean filter runs
(nbstripout, scripts/ensure_env.sh). Git compares a file's size before it runs a clean filter, so a
notebook saved with its outputs shows as modified in `git status` although `git diff` is empty; saved
stripped, its size is the committed one and `git status` tells the truth. The outputs stay on screen
until the page is reloaded; running the notebook draws them again."""
from __future__ import annotations

from pathlib import PurePosixPath

KIT_NOTEBOOKS = "notebooks"  # relative to the server's root (lab.sh serves the checkout's root)
# What the git filter strips beside outputs and counts: nbstripout's own default keys (its command line
# adds them; its strip_output does not) and the filter's --extra-keys. A test compares a saved notebook
# with the filter's output byte for byte, so a change on either side shows.
EXTRA_KEYS = ["metadata.signature", "metadata.widgets", "cell.metadata.collapsed", "cell.metadata.ExecuteTime",
              "cell.metadata.execution", "cell.metadata.heading_collapsed", "cell.metadata.hidden",
              "cell.metadata.scrolled", "metadata.language_info"]


def is_kit_notebook(path: str) -> bool:
    """A notebook of the kit's own folder (not a user's notebook elsewhere under the root)."""
    p = PurePosixPath(path.lstrip("/"))
    return p.suffix == ".ipynb" and len(p.parts) == 2 and p.parts[0] == KIT_NOTEBOOKS


def strip_before_save(model: dict, path: str, **_unused) -> None:
    """jupyter_server's pre-save hook: strips a kit notebook's model in place; any other file as is."""
    if model.get("type") != "notebook" or not is_kit_notebook(path) or not isinstance(model.get("content"), dict):
        return
    import nbformat
    from nbstripout import strip_output

    nb = strip_output(nbformat.from_dict(model["content"]), keep_output=False, keep_count=False, keep_id=True,
                      extra_keys=list(EXTRA_KEYS))
    model["content"] = nb
