"""Where the kit's files live: the package, the repository, recorded data and exports.

Every default path is decided here, so that a view, the loader and the writer agree on it.
"""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # dspark_lab/
REPO_ROOT = PACKAGE_DIR.parent
DATA_ENV, OUT_ENV = "DSPARK_DATA", "DSPARK_OUT"


def default_data_dir() -> Path:
    """The repository's data/ folder, or $DSPARK_DATA when set."""
    env = os.environ.get(DATA_ENV)
    return Path(env).expanduser() if env else REPO_ROOT / "data"


def runs_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The run files' folder under a data folder (default: the data dir)."""
    return (Path(data_dir) if data_dir is not None else default_data_dir()) / "runs"


def default_out_dir() -> Path:
    """Where exports go: $DSPARK_OUT, else out/ at the repository root (git-ignored)."""
    env = os.environ.get(OUT_ENV)
    return Path(env).expanduser() if env else REPO_ROOT / "out"


def machine_file_name(fingerprint: dict, recorded: str, what: str) -> str:
    """A machine record's file name under data/machines/: <gpu>-<what>-<yyyymmdd>.json, e.g.
    h200-card-20261201.json for an "NVIDIA H200" card recorded on 2026-12-01."""
    gpu = str(fingerprint.get("gpu", "gpu")).lower().replace("nvidia", "")
    slug = "-".join("".join(ch if ch.isalnum() else " " for ch in gpu).split()) or "gpu"
    return f"{slug}-{what}-{str(recorded)[:10].replace('-', '')}.json"
