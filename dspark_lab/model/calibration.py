"""Calibrations kept on disk, so a new session skips them: one JSON file of small dicts, keyed by
what makes a calibration valid (e.g. GPU name + driver + torch version for the target verify's
layers per ms). $DSPARK_CACHE names the folder, else ~/.cache/dspark-lab. A file that cannot be
read or parsed is ignored (a warning-free miss) and rewritten whole on the next store.
"""
from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Optional

CACHE_ENV = "DSPARK_CACHE"
FILE_NAME = "calibration.json"
_LOCK = threading.Lock()


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dspark-lab"


def cache_file() -> Path:
    return cache_dir() / FILE_NAME


def _read_all() -> dict:
    try:
        data = json.loads(cache_file().read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}  # missing or corrupt: a miss; store() rewrites the file
    return data if isinstance(data, dict) else {}


def load(key: str) -> Optional[dict]:
    """The calibration stored under `key`, or None (no file, corrupt file, no such key)."""
    with _LOCK:
        entry = _read_all().get(key)
    return entry if isinstance(entry, dict) else None


def store(key: str, values: dict) -> bool:
    """Merge `values` into the entry under `key` (atomic replace). False if the folder is not writable."""
    with _LOCK:
        data = _read_all()
        entry = data.get(key) if isinstance(data.get(key), dict) else {}
        data[key] = {**entry, **values}
        try:
            folder = cache_dir()
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".calibration-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, cache_file())
        except OSError:
            return False
    return True


def gpu_key(device_name: str, driver: str, torch_version: str) -> str:
    return f"gpu|{device_name}|driver {driver}|torch {torch_version}"


def host_key(cpu: str, python: str) -> str:
    return f"host|{cpu}|python {python}"
