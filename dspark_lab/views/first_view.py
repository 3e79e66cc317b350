"""The recorded panel's first view, kept as a snapshot: what a fresh kernel shows at once, before
pandas and plotly are imported, while the recorded panel is built again (views/cold_start.py).

  first_view.key()            what the first view depends on, as a hash (a few ms, nothing heavy imported)
  first_view.save(panel, k)   the drawn recorded panel's first view, stored under key k
  first_view.load()           the stored view for the current key, or None
  FirstView(view).widget      the stored view drawn: banner, settings, status, the figures' plotly mime output
  first_view.prepare()        the view stored ahead of the first kernel (`bash lab.sh` runs it beside the
                              server: python -m dspark_lab.views.first_view), so notebook 01 opens on it

The key covers the run files the recorded runs are loaded from (path, size, mtime_ns of each
*.jsonl under the data folder, $DSPARK_DATA or data/), the kit's own source (the same of each
dspark_lab/**/*.py), the Python and plotly installed, and the format of the file. The file is
first-view.json in the runs' cache folder ($DSPARK_CACHE, else ~/.cache/dspark-lab/runs; none when
the cache is off), written whole (a temporary name, then a rename), its bytes under this user's
keyed hash like the Parquet cache's entries (results/loading/cache.py): a file of another key,
cut, edited or planted is not shown (None), never an error.

key() and load() run before pandas is imported: they take the run files' suffix, the cache's off
values and the file limit from results.record (which imports neither pandas nor the query layer),
and read the data folder, the cache folder and the secret as results.record.paths and
results/loading/cache.py decide them, in a few lines that tests/test_cold_start.py holds to those
(cache.py imports pandas). save() runs once the panel has drawn, through `results`.
"""
from __future__ import annotations

import hashlib
import hmac
import html
import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Optional

from dspark_lab.results.record.paths import OFF as CACHE_OFF, PACKAGE_DIR, REPO_ROOT
from dspark_lab.results.record.records import RUN_SUFFIX
from dspark_lab.results.record.regular_files import JSON_FILE_LIMIT as FILE_LIMIT

FILE_NAME = "first-view.json"
FORMAT = 1  # bump when what a snapshot holds changes meaning
MIME = "application/vnd.plotly.v1+json"  # views.figures.FigureBox.MIME (not imported: that imports plotly)
RACY_S = 2.0  # a file changed this recently may change again unseen (coarse timestamps): no snapshot yet
REFRESHING = ("The last drawn view of the recorded runs, shown while they are loaded and drawn again; "
              "the controls follow in a moment.")


def data_dir() -> Path:
    """The folder the recorded runs are loaded from, as results.record.paths.default_data_dir names
    it (unchecked: a folder it refuses draws no panel, so no view is stored for it)."""
    env = os.environ.get("DSPARK_DATA")
    return Path(env).expanduser() if env else REPO_ROOT / "data"


def cache_dir() -> Optional[Path]:
    """The runs' cache folder, as results/loading/cache.py's default_dir names it; None when off."""
    env = os.environ.get("DSPARK_CACHE")
    if env:
        return None if env.strip().lower() in CACHE_OFF else Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "dspark-lab" / "runs"


def _read_small(path: Path, limit: int, private: bool = False) -> Optional[bytes]:
    """The bytes of the regular file `path` (opened without blocking: a FIFO never hangs), None when it
    is not one, is larger than `limit`, or (`private`) is another user's or readable by others."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_NOFOLLOW if private else 0))
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
                return None
            if private and (st.st_uid != os.getuid() or st.st_mode & 0o077):
                return None
            data = f.read(limit + 1)
    except OSError:  # none there, a symlink (private), a folder, no permission
        return None
    return data if len(data) <= limit else None


def _secret() -> Optional[bytes]:
    """This user's cache secret as results/loading/cache.py's secret() reads it (made there, on the
    first load of the runs); None before it exists or when it cannot be trusted."""
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config").expanduser()
    text = _read_small(base / "dspark-lab" / "cache-key", 4096, private=True)
    text = text.strip() if text is not None else None
    return text if text is not None and len(text) >= 32 else None


def _mac(secret: bytes, body: bytes) -> bytes:
    return hmac.new(secret, body, hashlib.sha256).hexdigest().encode()


def _stamps(folder: Path, suffix: str) -> list:
    """(relative path, size, mtime_ns) of each file ending in `suffix` under `folder`, sorted;
    symlinked folders not followed (as the run loader walks)."""
    out = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for n in names:
            if n.endswith(suffix):
                p = os.path.join(root, n)
                try:
                    st = os.stat(p)
                except OSError:  # gone since it was listed: not read by the loader either
                    continue
                out.append((os.path.relpath(p, folder), st.st_size, st.st_mtime_ns))
    return sorted(out)


def _plotly_stamp() -> list:
    """plotly's package and its JupyterLab renderer as installed (a reinstall changes them), without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.origin:
        return []
    pkg = Path(spec.origin).parent
    out = []
    for p in (pkg / "__init__.py", pkg / "labextension" / "package.json"):
        try:
            st = p.stat()
            out.append([str(p), st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([str(p), None, None])
    return out


def _key_and_newest() -> tuple[Optional[str], int]:
    try:
        data = data_dir().resolve()
    except (ValueError, OSError, RuntimeError):  # a path that cannot be resolved: the panel says why, no snapshot
        return None, 0
    runs, source = _stamps(data, RUN_SUFFIX), _stamps(PACKAGE_DIR, ".py")
    what = {"format": FORMAT, "python": sys.version, "plotly": _plotly_stamp(), "data": str(data),
            "runs": runs, "source": source}
    digest = hashlib.sha256(json.dumps(what, ensure_ascii=True).encode()).hexdigest()
    return digest, max((m for _, _, m in runs + source), default=0)


def key() -> Optional[str]:
    """What the recorded panel's first view depends on, as a hex digest; None when the data folder's
    path cannot be resolved."""
    return _key_and_newest()[0]


def _path() -> Optional[Path]:
    folder = cache_dir()
    return None if folder is None else folder / FILE_NAME


def view_of(panel) -> Optional[dict]:
    """What the recorded panel shows now, as plain JSON; None unless it drew a point without an error."""
    boxes = list(panel.figs.items())
    if panel.last is None or panel.error.value or any(getattr(b, "bundle", None) is None for _, b in boxes):
        return None
    return {"banner": panel.mode_html.value, "status": panel.status.value,
            "settings": [[str(w.description), str(getattr(w, "label", w.value))] for w in panel.controls.values()],
            "runs": panel.run_note.value if panel.run_note is not None else "",
            "figures": [{"name": name, "min_height": b.widget.layout.min_height, "bundle": b.bundle} for name, b in boxes]}


def save(panel, at_key: Optional[str]) -> Optional[Path]:
    """Store the recorded panel's first view under `at_key` (taken before its runs were loaded, so
    that a file changed meanwhile leaves a key that no longer matches). Returns the file, or None
    when nothing was stored (no key, no cache, no secret, a file changed within RACY_S, nothing drawn,
    a write that failed: the next start draws the panel as without a snapshot)."""
    from dspark_lab.results.loading import cache

    path, view = _path(), view_of(panel)
    try:
        if at_key is None or path is None or view is None or path.parent != cache.default_dir():
            return None
    except ValueError:  # an unusable $DSPARK_CACHE (results.record.paths.SettingError)
        return None
    secret = cache.secret()  # made here when no load of the runs has made it yet
    now, newest = _key_and_newest()
    if secret is None or now != at_key or time.time() - newest / 1e9 < RACY_S:
        return None
    body = json.dumps({"format": FORMAT, "key": at_key, "view": view}, separators=(",", ":")).encode()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        cache.atomic_bytes(path, _mac(secret, body) + b"\n" + body)  # a reader sees the old file or the new one
    except OSError:
        return None
    return path


def _well_formed(view) -> bool:
    def text(v) -> bool:
        return isinstance(v, str)

    return (isinstance(view, dict) and all(text(view.get(k)) for k in ("banner", "status", "runs"))
            and isinstance(view.get("settings"), list)
            and all(isinstance(s, list) and len(s) == 2 and all(map(text, s)) for s in view["settings"])
            and isinstance(view.get("figures"), list) and bool(view["figures"])
            and all(isinstance(f, dict) and text(f.get("name")) and text(f.get("min_height"))
                    and isinstance(f.get("bundle"), dict) and isinstance(f["bundle"].get(MIME), dict)
                    for f in view["figures"]))


def load(at_key: Optional[str] = None) -> Optional[dict]:
    """The stored first view for `at_key` (default: the current key()), or None: no file, another
    key, bytes that fail their keyed hash, not a snapshot of this format."""
    at_key = key() if at_key is None else at_key
    path, secret = _path(), _secret()
    data = _read_small(path, FILE_LIMIT) if at_key is not None and path is not None and secret is not None else None
    if data is None:
        return None
    mac, _, body = data.partition(b"\n")
    if not hmac.compare_digest(mac, _mac(secret, body)):
        return None
    try:
        snap = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(snap, dict) or snap.get("format") != FORMAT or snap.get("key") != at_key:
        return None
    view = snap.get("view")
    return view if _well_formed(view) else None


def prepare() -> str:
    """The first view for the current key stored where none is: the recorded panel drawn headless (its
    runs loaded, their Parquet cache filled on the way) and saved. What happened, in a word: "current"
    (one was stored already), "stored", or "not stored" (no key, no cache, nothing drawn: save's cases)."""
    at_key = key() if _path() is not None else None  # no cache folder: nowhere to store it, nothing drawn
    if at_key is None:
        return "not stored"
    if load(at_key) is not None:
        return "current"
    from dspark_lab.views import panel as panel_mod  # pandas and plotly: only where a view is drawn

    panel = panel_mod.make_panel()
    try:
        return "stored" if save(panel, at_key) is not None else "not stored"
    finally:
        panel.close()


class FirstView:
    """A stored view drawn as ipywidgets: the banner, a line saying it is being refreshed, the
    settings it shows, its status line and each figure as plotly's mime output in an Output (as
    FigureBox draws it; set as the Output's outputs, so no kernel display call is needed)."""

    def __init__(self, view: dict):
        import ipywidgets as W

        self.note = W.HTML(f"<div class='dspark-first-view-note' style='padding:2px 8px;color:#555'>"
                           f"<i>{html.escape(REFRESHING)}</i></div>")
        settings = " · ".join(f"{html.escape(d)} <b>{html.escape(v)}</b>" for d, v in view["settings"])
        figs = []
        for f in view["figures"]:
            out = W.Output(layout=W.Layout(min_height=f["min_height"]))
            out.add_class("dspark-first-view-figure")
            out.outputs = ({"output_type": "display_data", "data": f["bundle"], "metadata": {}},)
            figs.append(out)
        parts = [W.HTML(view["banner"]), self.note, W.HTML(f"<div class='dspark-first-view-settings'>{settings}</div>")]
        parts += [W.HTML(view["runs"])] if view["runs"] else []
        self.widget = W.VBox(parts + [W.HTML(view["status"]), *figs])
        self.widget.add_class("dspark-first-view")
        self.figures = figs

    def show_error(self, e: BaseException, title: str) -> None:
        """Say in place of the refreshing line why the recorded panel did not come."""
        msg = (str(e).strip() or repr(e)).splitlines()[0][:2000]
        self.note.value = (f"<div class='dspark-error' style='color:#8c1c13;padding:4px 8px;border-left:4px solid #d62728'>"
                           f"<b>{html.escape(title)}:</b> {html.escape(f'{type(e).__name__}: {msg}')}</div>")

    def close(self) -> None:
        self.widget.close()


if __name__ == "__main__":
    print(f"the recorded panel's first view: {prepare()}")
