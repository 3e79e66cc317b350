"""Where the kit's files live: the package, the repository, recorded data and exports.

Every default path is decided here, so that a view, the loader and the writer agree on it. The
folders named by the environment ($DSPARK_DATA, $DSPARK_CACHE) are checked here, once, each with one
clear SettingError naming the variable: blank, an unknown ~user, a symlink loop or a
path that is not a folder is refused rather than met later as a traceback or a folder named "  ".
"""
from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2]  # dspark_lab/
REPO_ROOT = PACKAGE_DIR.parent
DATA_ENV, OUT_ENV, CACHE_ENV = "DSPARK_DATA", "DSPARK_OUT", "DSPARK_CACHE"
OFF = ("off", "0", "none", "no", "false")  # DSPARK_CACHE values that turn the caches off


class SettingError(ValueError):
    """An environment variable names a folder that cannot be used; the message names the variable."""


def checked_folder(name: str, value: str, allowed: str) -> Path:
    """The folder `value` of variable `name`, expanded, or SettingError saying why not and what is
    `allowed`. A folder that does not exist yet is fine (it is made when first written)."""
    def refuse(why: str) -> SettingError:
        return SettingError(f"{name}={value!r:.200}: {why}; allowed: {allowed}")

    if not value.strip():
        raise refuse("blank")
    try:
        path = Path(value).expanduser()
    except RuntimeError:  # Python 3.11: an unknown ~user
        path = Path(value)
    if str(path).startswith("~"):
        raise refuse(f"{value.split('/')[0]!r:.60} is not a known user's home")
    try:
        resolved = path.resolve()
        if resolved.exists() and not resolved.is_dir():
            raise refuse("exists and is not a folder")
    except (OSError, RuntimeError) as e:  # a symlink loop: RuntimeError (3.12) or OSError (ELOOP)
        raise refuse(f"cannot be resolved ({getattr(e, 'strerror', None) or e})") from None
    return path


def file_name_part(value, what: str) -> str:
    """`value` when it can stand as one file name (a run id, a --name stem), else ValueError naming
    `what`: empty, ".", "..", a "/" or a NUL byte would climb out of the folder it is meant for."""
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string (one file name), got {type(value).__name__}")
    if value in ("", ".", "..") or "/" in value or "\0" in value or (os.altsep and os.altsep in value):
        raise ValueError(f"{what} {ascii(value)[:80]} must be one file name: not empty, not '.' or '..', "
                         "no '/' (it names a file inside the chosen folder)")
    if len(os.fsencode(value)) > 200:
        raise ValueError(f"{what} is {len(os.fsencode(value))} bytes long; a file name takes at most 200 here")
    return value


def resolved_parent(path: str | os.PathLike) -> Path:
    """`path` with its folder resolved (symlinks and "..", also through folders that do not exist
    yet) and its last part kept as given: what a later mkdir(parents=True) and write will really
    touch, so that a check of it sees where the file lands ("missing/../runs/x" is runs/x)."""
    path = Path(path)
    return Path(os.path.realpath(path.parent)) / path.name


def default_data_dir() -> Path:
    """The repository's data/ folder, or $DSPARK_DATA when set (checked: SettingError if unusable)."""
    env = os.environ.get(DATA_ENV)
    if not env:
        return REPO_ROOT / "data"
    return checked_folder(DATA_ENV, env, "a folder holding runs/ (default: data/ of the repository)")


def cache_setting():
    """$DSPARK_CACHE as set: False when unset (the caches' own defaults), None when turned off
    (one of OFF), else its folder (checked: SettingError if unusable)."""
    env = os.environ.get(CACHE_ENV)
    if not env:
        return False
    if env.strip().lower() in OFF:
        return None
    return checked_folder(CACHE_ENV, env, f"a folder outside the runs folders, or one of {', '.join(OFF)} (no cache)")


def runs_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The run files' folder under a data folder (default: the data dir)."""
    return (Path(data_dir) if data_dir is not None else default_data_dir()) / "runs"


def default_out_dir() -> Path:
    """Where exports go: $DSPARK_OUT, else out/ at the repository root (git-ignored)."""
    env = os.environ.get(OUT_ENV)
    return Path(env).expanduser() if env else REPO_ROOT / "out"


def gpu_slug(gpu_name: str) -> str:
    """The GPU's part of a machine record's file name: "NVIDIA H200" -> h200, "NVIDIA H100 80GB HBM3" ->
    h100-80gb-hbm3."""
    gpu = str(gpu_name).lower().replace("nvidia", "")
    return "-".join("".join(ch if ch.isalnum() else " " for ch in gpu).split()) or "gpu"


def machine_file_name(fingerprint: dict, recorded: str, what: str, *, with_time: bool = False) -> str:
    """A machine record's file name under data/machines/: <gpu>-<what>-<yyyymmdd>.json, e.g.
    h200-card-20261201.json for an "NVIDIA H200" card recorded on 2026-12-01; `with_time`:
    <gpu>-<what>-<yyyymmdd>-<HHMM>.json from an ISO `recorded` (two records of one day both kept)."""
    slug = gpu_slug(fingerprint.get("gpu", "gpu"))
    day = str(recorded)[:10].replace("-", "")
    hhmm = str(recorded)[11:16].replace(":", "")
    if with_time and not (len(hhmm) == 4 and hhmm.isdigit()):
        raise ValueError(f"recorded must be an ISO time (yyyy-mm-ddTHH:MM...) for a timed file name; got {recorded!r}")
    return f"{slug}-{what}-{day}-{hhmm}.json" if with_time else f"{slug}-{what}-{day}.json"
