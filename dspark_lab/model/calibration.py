"""Calibrations kept on disk, so a new session skips them: one JSON file of small dicts, keyed by
what makes a calibration valid (e.g. GPU name + driver + torch version for the target verify's
layers per ms). $DSPARK_CACHE names the folder (results.record.paths.cache_setting checks it; off turns
this cache off too, and an unusable setting is treated as off), else ~/.cache/dspark-lab. A file
that cannot be read or parsed is ignored (a warning-free miss) and rewritten whole on the next
store. The file is not trusted: `value` gives a number only when it is finite and within the
bounds its user states (a hand-edited 1e9 or Infinity would hang or break every point).
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import threading
from pathlib import Path
from typing import Optional

from dspark_lab.results.record.paths import CACHE_ENV, SettingError, cache_setting  # noqa: F401 - CACHE_ENV: its name
from dspark_lab.results.record.regular_files import lexists_not_regular, read_regular

FILE_NAME = "calibration.json"
LIMIT = 1 << 20  # bytes read at most: a few small dicts (a FIFO or /dev/zero there is a miss, never a hang)
_LOCK = threading.Lock()


def cache_dir() -> Optional[Path]:
    """The folder, or None when the cache is off (DSPARK_CACHE=off, or a setting that cannot be used)."""
    try:
        setting = cache_setting()
    except SettingError:
        return None
    return Path.home() / ".cache" / "dspark-lab" if setting is False else setting


def cache_file() -> Optional[Path]:
    folder = cache_dir()
    return folder / FILE_NAME if folder is not None else None


def _read_all() -> dict:
    path = cache_file()
    if path is None:
        return {}
    try:
        data = json.loads(read_regular(path, LIMIT).decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}  # missing, corrupt, a FIFO, a device or too large: a miss; store() rewrites the file
    return data if isinstance(data, dict) else {}


def load(key: str) -> Optional[dict]:
    """The calibration stored under `key`, or None (no file, corrupt file, no such key)."""
    with _LOCK:
        entry = _read_all().get(key)
    return entry if isinstance(entry, dict) else None


def value(key: str, name: str, lo: float, hi: float) -> Optional[float]:
    """The number `name` of the entry under `key` when it is a finite number in [lo, hi], else None
    (a miss: the caller calibrates again and stores the new value over the bad one)."""
    v = (load(key) or {}).get(name)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        v = float(v)
    except OverflowError:
        return None
    return v if math.isfinite(v) and lo <= v <= hi else None


def store(key: str, values: dict) -> bool:
    """Merge `values` into the entry under `key` (atomic replace). False if the folder is not writable."""
    with _LOCK:
        data = _read_all()
        entry = data.get(key) if isinstance(data.get(key), dict) else {}
        data[key] = {**entry, **values}
        folder = cache_dir()
        if folder is None:
            return False
        if lexists_not_regular(cache_file()):
            return False  # a FIFO, a device or a link there is not the kit's: never replaced
        tmp = None
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".calibration-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, cache_file())
        except OSError:  # a full disk: the old file stands, and no half-written temporary is left
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            return False
    return True


def gpu_key(device_name: str, driver: str, torch_version: str) -> str:
    return f"gpu|{device_name}|driver {driver}|torch {torch_version}"


def host_key(cpu: str, python: str) -> str:
    return f"host|{cpu}|python {python}"


# --- the machine's quietest host work per point (results.rules.noise.RUN_RULE's baseline) ---------------
def baseline_key(fingerprint: dict) -> str:
    """One machine as results.rules.noise.RUN_RULE sees it: GPU, driver, CUDA, torch."""
    return "host-baseline|" + "|".join(f"{k} {fingerprint.get(k, 'unknown')}" for k in ("gpu", "driver", "cuda", "torch"))


def host_baselines(fingerprint: dict) -> dict:
    """Point key -> the quietest host work per step this machine has recorded there (see keep_quietest)."""
    return {k: v for k, v in (load(baseline_key(fingerprint)) or {}).items() if isinstance(v, dict)}


def keep_quietest(fingerprint: dict, measured: dict) -> dict:
    """Keep, per point key, the entry with the lowest `host_work_ms` among the cached one and
    `measured` (results.rules.noise.quiet_baselines of a run); returns what is kept. A run disturbed as a
    whole has more host work than the quietest and never replaces it."""
    kept = host_baselines(fingerprint)
    better = {k: e for k, e in measured.items()
              if k not in kept or float(e["host_work_ms"]) < float(kept[k].get("host_work_ms", float("inf")))}
    if better:
        store(baseline_key(fingerprint), better)
    return {**kept, **better}
