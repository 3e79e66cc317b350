"""The host a card is measured on (results.analyses.card_host reads it): the CPU model, the cores this
process may use and the machine has, the frequency governor, the Python and torch builds, the kernel."""
from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import torch

GOVERNOR = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
CPUINFO = Path("/proc/cpuinfo")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def cpu_model(cpuinfo: str = "") -> str:
    """The first "model name" of /proc/cpuinfo (or `cpuinfo`'s text), else platform.processor(), else "unknown"."""
    for line in (cpuinfo or _read(CPUINFO)).splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model") and value.strip():
            return value.strip()
    return platform.processor() or "unknown"


def governor(path: Path = GOVERNOR) -> str:
    """cpu0's frequency governor ("performance", "powersave", ...), "unknown" where the file is absent."""
    return _read(path).strip() or "unknown"


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 0


def host() -> dict:
    """This host's fields (results.analyses.card_host.HOST_FIELDS, and the details behind them)."""
    return {"cpu_model": cpu_model(), "cores": _usable_cores(), "cores_online": os.cpu_count() or 0,
            "governor": governor(), "python": platform.python_version(),  # as the fingerprint writes them
            "torch": torch.__version__, "kernel": platform.platform(),
            "python_build": f"{platform.python_implementation()} " + " ".join(platform.python_build())
                            + f" ({platform.python_compiler()}, {os.path.basename(sys.executable)})",
            "torch_build": f"git {getattr(torch.version, 'git_version', '?')[:10]}, cuda {torch.version.cuda or 'none'}, "
                           f"debug {bool(getattr(torch.version, 'debug', False))}"}
