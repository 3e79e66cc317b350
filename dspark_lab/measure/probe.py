"""The machine's fingerprint, and a measured answer to: does a non-blocking copy from pageable
memory block the host on this GPU and driver? Plus each strategy's host cost per call."""
from __future__ import annotations

import functools
import platform
import subprocess
import time

import numpy as np
import torch

from dspark_lab import strategies
from dspark_lab.predicate import ParallelSettings
from dspark_lab.results.facts.strategy_table import BASELINE, SYNC_FREE


@functools.lru_cache(maxsize=1)
def driver_version() -> str:
    """The GPU driver's version as NVML reports it ("580.95.05"), for the fingerprint and the
    calibration keys: through pynvml when installed (no subprocess), else through nvidia-smi
    (which reads NVML too); "unknown" when neither answers."""
    try:
        import pynvml  # optional (package nvidia-ml-py): imported only where a driver is asked for

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:  # noqa: BLE001 - pynvml is optional
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def fingerprint() -> dict:
    """GPU, driver, CUDA and torch versions (on a CPU-only machine: gpu "none")."""
    cuda = torch.cuda.is_available()
    fp = {
        "gpu": torch.cuda.get_device_name(0) if cuda else "none",
        "driver": driver_version() if cuda else "none",
        "cuda": torch.version.cuda or "none",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
    }
    if cuda:
        p = torch.cuda.get_device_properties(0)
        fp.update(sm_count=p.multi_processor_count, capability=f"{p.major}.{p.minor}", memory_gib=round(p.total_memory / 2**30, 1))
    return fp


def _host_us(fn, reps: int) -> np.ndarray:
    out = np.empty(reps)
    for i in range(reps):
        t0 = time.perf_counter()
        fn()
        out[i] = (time.perf_counter() - t0) * 1e6
    return out


_CLOCK_HZ = [1.5e9]  # GPU cycles per second for torch.cuda._sleep, calibrated per run


def busy_kernel(ms: float) -> None:
    """Queue about `ms` of GPU work (torch.cuda._sleep spins for a number of cycles)."""
    torch.cuda._sleep(int(ms * 1e-3 * _CLOCK_HZ[0]))


def sleep_clock_hz() -> float:
    """The GPU cycles per second busy_kernel assumes (calibrated by calibrate_sleep)."""
    return _CLOCK_HZ[0]


def calibrate_sleep() -> None:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    a.record()
    torch.cuda._sleep(10_000_000)
    b.record()
    b.synchronize()
    _CLOCK_HZ[0] = 10_000_000 / (a.elapsed_time(b) * 1e-3)


def run_probe(reps: int = 30, queued_ms: float = 10.0) -> dict:
    """Host time of one call of each strategy, median µs, with the GPU idle and with `queued_ms`
    of work queued ahead. A call that waits for the queue blocks the host; the verdict for the
    pageable non-blocking copy is whether its queued time exceeds half the queued work."""
    if not torch.cuda.is_available():
        return {"available": False, "reason": "no CUDA device: the probe needs a GPU", "pageable_nonblocking_blocks": None}
    dev = torch.device("cuda")
    calibrate_sleep()
    ep8 = ParallelSettings(ep_size=8)  # predicate true, so on-demand strategies do copy
    buf = torch.zeros((), dtype=torch.int32, device=dev)
    result: dict = {"available": True, "queued_ms": queued_ms, "strategies": {}}
    for name in strategies.BUILTIN:
        fn = strategies.get(name).fn
        call = lambda: fn(123, dev, ep8, buffer=buf)  # noqa: E731
        for _ in range(5):
            call()
        torch.cuda.synchronize()
        idle = []
        queued = []
        for _ in range(reps):
            torch.cuda.synchronize()
            idle.append(_host_us(call, 1)[0])
            torch.cuda.synchronize()
            busy_kernel(queued_ms)
            queued.append(_host_us(call, 1)[0])
        torch.cuda.synchronize()
        result["strategies"][name] = {"idle_us": float(np.median(idle)), "queued_us": float(np.median(queued))}
    nb = result["strategies"][SYNC_FREE]["queued_us"]
    result["pageable_nonblocking_blocks"] = bool(nb > queued_ms * 1e3 / 2)
    dd = result["strategies"][BASELINE]["queued_us"]
    result["device_direct_blocks"] = bool(dd > queued_ms * 1e3 / 2)
    return result


def describe(probe: dict) -> str:
    if not probe.get("available"):
        return probe.get("reason", "probe not run")
    verdict = "BLOCKS" if probe["pageable_nonblocking_blocks"] else "does not block"
    lines = [f"non-blocking copy from pageable memory {verdict} the host here "
             f"(host time with {probe['queued_ms']:.0f} ms queued: {probe['strategies'][SYNC_FREE]['queued_us']:.0f} µs)"]
    for name, s in probe["strategies"].items():
        lines.append(f"  {name:18s} idle {s['idle_us']:8.1f} µs   queued {s['queued_us']:9.1f} µs")
    return "\n".join(lines)
