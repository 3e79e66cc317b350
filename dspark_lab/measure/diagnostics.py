"""Per-trial diagnostics, cheap enough to keep on for every trial (no profiler).

For each timed trial: the GPU time of the step's GPU work (CUDA event pairs around the target
verify and the draft forward, read after the trial's closing sync), the host's wall time split
into real work and deliberate wait (measure/waits.py: the emulated host cost in
spin_until and the by-design blocking calls), the time the measuring thread was off the CPU,
its context switches (getrusage), the machine's CPU steal (/proc/stat), and the GPU's SM clock and
clock-event ("throttle") reasons through NVML when `pynvml` (package nvidia-ml-py) is installed.
Anything a platform does not report is None, never a guess.

Cost per trial: two getrusage calls, two small /proc/stat reads, four NVML queries; per step four
cudaEventRecord calls on the host (the events themselves are read after the trial is timed).
"""
from __future__ import annotations

import os
import time
from typing import Optional

import torch

from dspark_lab.measure import waits

try:  # Linux: per-thread counters (the CUDA runtime's own threads are left out)
    import resource

    _RUSAGE = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
except ImportError:  # pragma: no cover - Windows
    resource = None
    _RUSAGE = None

# NVML clock-event reasons that slow the GPU down. Left out: GPU idle, application/display clock
# settings (configuration, not disturbance) and sync boost.
NVML_SLOWDOWN_REASONS = {
    0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
}
SLOWDOWN_MASK = sum(NVML_SLOWDOWN_REASONS)
DIAG_FIELDS = ("gpu_ms", "host_work_ms", "host_wait_ms", "offcpu_ms", "ctx_switches_invol", "ctx_switches_vol",
               "cpu_steal_ms", "sm_clock_mhz", "throttle_reasons")


def describe_reasons(mask: Optional[int]) -> str:
    if mask is None:
        return "unknown"
    names = [n for bit, n in NVML_SLOWDOWN_REASONS.items() if mask & bit]
    return ",".join(names) or "none"


# -- OS counters -----------------------------------------------------------------------------------

def _ctx_switches() -> tuple[Optional[int], Optional[int]]:
    if resource is None:
        return None, None
    r = resource.getrusage(_RUSAGE)
    return int(r.ru_nivcsw), int(r.ru_nvcsw)


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") and "SC_CLK_TCK" in getattr(os, "sysconf_names", {}) else 100


def _steal_jiffies() -> Optional[int]:
    """All CPUs' steal time in clock ticks (the 8th value of /proc/stat's cpu line), None if absent."""
    try:
        with open("/proc/stat", "rb") as f:
            parts = f.readline().split()
    except OSError:
        return None
    return int(parts[8]) if len(parts) > 8 and parts[0] == b"cpu" else None


# -- NVML ------------------------------------------------------------------------------------------

class Nvml:
    """The SM clock and slowdown reasons of one GPU; every method returns None without NVML."""

    def __init__(self, device_index: int = 0):
        self.handle = None
        self.error = ""
        try:
            import pynvml  # optional (package nvidia-ml-py): imported only when a GPU is diagnosed

            pynvml.nvmlInit()
            self._nv = pynvml
            self.handle = self._handle(pynvml, device_index)
        except Exception as e:  # noqa: BLE001 - NVML is optional
            self.error = f"{type(e).__name__}: {e}"

    @staticmethod
    def _handle(nv, index: int):
        # Match by UUID: NVML numbers all GPUs, CUDA only the visible ones.
        try:
            uuid = str(torch.cuda.get_device_properties(index).uuid)
            return nv.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
        except Exception:  # noqa: BLE001
            return nv.nvmlDeviceGetHandleByIndex(index)

    @property
    def available(self) -> bool:
        return self.handle is not None

    def sm_clock_mhz(self) -> Optional[int]:
        if self.handle is None:
            return None
        try:
            return int(self._nv.nvmlDeviceGetClockInfo(self.handle, self._nv.NVML_CLOCK_SM))
        except Exception:  # noqa: BLE001
            return None

    def slowdown_reasons(self) -> Optional[int]:
        if self.handle is None:
            return None
        nv = self._nv
        try:  # the newer name first (nvidia-ml-py 12.535+), then the older one
            get = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
            return int(get(self.handle)) & SLOWDOWN_MASK
        except Exception:  # noqa: BLE001
            return None


_NVML: dict[int, Nvml] = {}


def nvml_for(device_index: int = 0) -> Nvml:
    """One Nvml per device for the process (nvmlInit and the handle lookup are not free)."""
    if device_index not in _NVML:
        _NVML[device_index] = Nvml(device_index)
    return _NVML[device_index]


def nvml_of(device) -> Optional[Nvml]:
    """nvml_for a torch device; None off CUDA (no clocks or temperatures to read)."""
    return nvml_for(device.index or 0) if device.type == "cuda" else None


# -- GPU time of the step's GPU work -----------------------------------------------------------------

class GpuWorkClock:
    """CUDA event pairs around GPU work, from a pool reused across trials (no allocation per step)."""

    def __init__(self):
        self._events: list = []
        self._n = 0

    def reset(self) -> None:
        self._n = 0

    def _next(self):
        if self._n == len(self._events):
            self._events.append(torch.cuda.Event(enable_timing=True))
        ev = self._events[self._n]
        self._n += 1
        return ev

    def start(self) -> None:
        self._next().record()

    stop = start

    def elapsed_ms(self) -> Optional[float]:
        """Sum over recorded pairs (call after the work is synchronized); None if none was recorded."""
        if self._n < 2:
            return None
        ev = self._events
        return float(sum(ev[i].elapsed_time(ev[i + 1]) for i in range(0, self._n - 1, 2)))


# -- one trial -------------------------------------------------------------------------------------

class TrialDiagnostics:
    """begin() just before a trial's timed steps, end() after its closing sync -> the DIAG_FIELDS.

    `step` is the measured object: when it has a `gpu_clock` attribute (workload.LabStep) and
    CUDA is in use, CUDA events time its GPU work during the trial. `nvml` may be shared."""

    def __init__(self, step: object = None, *, cuda: Optional[bool] = None, nvml: Optional[Nvml] = None):
        if cuda is None:
            dev = getattr(step, "device", None)
            cuda = getattr(dev, "type", None) == "cuda"
        self.step = step if hasattr(step, "gpu_clock") else None
        self.clock = GpuWorkClock() if cuda and self.step is not None else None
        self.nvml = nvml if nvml is not None else (Nvml(getattr(getattr(step, "device", None), "index", None) or 0)
                                                   if cuda else None)

    def begin(self) -> dict:
        snap = {"sm": self._sm(), "reasons": self._reasons(), "steal": _steal_jiffies()}
        snap["invol"], snap["vol"] = _ctx_switches()
        if self.clock is not None:
            self.clock.reset()
            self.step.gpu_clock = self.clock
        snap["wait"] = waits.total_s()
        snap["thread"] = time.thread_time()
        snap["wall"] = time.perf_counter()
        return snap

    def end(self, snap: dict, steps: int, *, wall_s: Optional[float] = None, tail_wait_s: float = 0.0) -> dict:
        """`wall_s`: the trial's timed wall time (default: since begin); `tail_wait_s`: of it, the
        closing sync (waiting for the GPU to drain is wait, not host work)."""
        wall_end = time.perf_counter()
        thread_end = time.thread_time()
        wait = waits.total_s() - snap["wait"] + tail_wait_s
        wall = wall_s if wall_s is not None else wall_end - snap["wall"]
        if self.clock is not None:
            self.step.gpu_clock = None
        invol, vol = _ctx_switches()
        steal = _steal_jiffies()
        sm = [v for v in (snap["sm"], self._sm()) if v is not None]
        reasons = [v for v in (snap["reasons"], self._reasons()) if v is not None]
        gpu = self.clock.elapsed_ms() if self.clock is not None else None
        n = max(steps, 1)
        return {
            "gpu_ms": gpu / n if gpu is not None else None,
            "host_work_ms": max(wall - wait, 0.0) * 1e3 / n,
            "host_wait_ms": wait * 1e3 / n,
            "offcpu_ms": max((wall_end - snap["wall"]) - (thread_end - snap["thread"]), 0.0) * 1e3 / n,
            "ctx_switches_invol": invol - snap["invol"] if invol is not None else None,
            "ctx_switches_vol": vol - snap["vol"] if vol is not None else None,
            "cpu_steal_ms": (steal - snap["steal"]) * 1e3 / _CLK_TCK if steal is not None and snap["steal"] is not None else None,
            "sm_clock_mhz": min(sm) if sm else None,
            "throttle_reasons": (reasons[0] | reasons[-1]) if reasons else None,
        }

    def _sm(self):
        return self.nvml.sm_clock_mhz() if self.nvml is not None else None

    def _reasons(self):
        return self.nvml.slowdown_reasons() if self.nvml is not None else None
