"""Keep a hot path sync-free: `with dspark_lab.guard.no_host_syncs(): step()` fails with the file:line of
the first host sync in the block.

Three witnesses, because none sees everything:

- PyTorch's sync debug mode (`torch.cuda.set_sync_debug_mode`, via measure.syncs.sync_debug_sites)
  sees the syncs PyTorch makes through its own CUDA wrappers (`.item()`, `bool(tensor)`, blocking
  copies, `nonzero`, `torch.cuda.synchronize`) and names the exact line. It cannot see syncs made
  by other libraries (a custom kernel's launcher, FlashInfer, NCCL's host side, cupy) or by raw
  runtime calls, nor a non-blocking copy into pageable memory, nor (on some torch versions) event
  waits.
- The profiler's CUDA sync events (CUPTI, `_ExperimentalConfig(enable_cuda_sync_events=True)`,
  cat "cuda_sync") see every stream, event and context synchronization the runtime or driver makes,
  from any library; each is attributed to the innermost Python function around its runtime call
  (the line of that function's `def`, as the profiler names frames). They do not see a blocking
  copy that makes no sync call.
- The same trace's copies: a synchronous memcpy API call (`cudaMemcpy`, `cuMemcpyDtoH`), and a
  device-to-host copy into pageable memory whose ATen op made no sync call, which blocks the host
  although it was asked to be non-blocking.

A fourth witness, opt-in (`capture=True`): the block runs once under CUDA graph capture
(`torch.cuda.CUDAGraph`), so its GPU work is recorded, not run (guard a step whose outputs the
block does not read, warmed up once before, as any capture needs). A sync during capture fails
the capture: in the global capture mode (the default, `capture_error_mode="global"`) CUDA forbids
its "potentially unsafe" calls from every thread of the process, so a sync from another thread can
fail it too, and "thread_local" and "relaxed" narrow what fails it (see CUDA's
cudaStreamCaptureMode; rocm-systems #4508 on HIP). PyTorch also refuses a copy between a CUDA
tensor and an unpinned CPU tensor during capture. The guard turns that failure into a record at
the line that made it; the first sync ends the capture, so this witness sees one sync per block
(the other witnesses see the block up to that line).

What none of the three sees: a host-to-device `non_blocking=True` copy from pageable memory that the
driver stages synchronously. It makes no sync call and its ATen op and memcpy look asynchronous, yet
the host waits for the queued work; where that happens depends on the machine and the copy's size
(the platform card's "waits that no sync counter sees": `dspark-lab doctor --card`; on the recorded
H200 card, from a few MB up). Copy from pinned memory, or measure the step's host time.

One host sync is one record: where two witnesses saw the same sync (sync debug mode and a CUPTI
sync event on the same thread, the event's call made just before the debug-mode warning was
delivered; or CUPTI and the trace's copies on the same call correlation), their records merge into
one HostSync that lists every witness and carries the exact line when any witness has it. So
`count()`, `violations` and the summary count syncs, not sightings (one `.item()` once, not twice).

Without CUDA nothing can synchronize and nothing can be checked: the guard warns (or, with
`strict=True`, raises). `count=True` reports instead of failing. `allow` lists by-design syncs, each with why:
"PATTERN: REASON", where PATTERN is an fnmatch pattern on "path/file.py:LINE" (the last two path
parts) or on the whole site "path/file.py:LINE function", or a bare function name (a PATTERN alone
still works; its reason reads as not given). A line of source marked `# sync-ok: <reason>` is
allowed too, with that reason (the comment `dspark-lab lint` honours).
"""
from __future__ import annotations

import contextlib
import fnmatch
import linecache
import re
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional, Sequence

import pandas as pd
import torch

from dspark_lab.lint.exempt import reason_at
from dspark_lab.measure import syncs as _syncs
from dspark_lab.measure import trace as _trace

GUARD_RANGE = "dspark_lab.guard.block"
# A marker range emitted when sync debug mode reports a sync: torch delivers the warning when the
# Python call that synced returns, so the sync's CUDA call lies just before the marker in the trace.
DEBUG_MARK = "dspark_lab.guard.debug_sync"
# Marks this close with no sync call between them are one call's warnings, delivered together.
ONE_CALL_MARKS_US = 100.0
DEBUG_MODE, CUPTI, TRACE = "sync debug mode", "CUDA sync events", "trace copies"
CAPTURE = "graph capture"  # the opt-in fourth witness
CAPTURE_MODES = ("global", "thread_local", "relaxed")
# CUPTI synchronization records that block the host ("Stream Wait Event" is a device-side wait).
CUPTI_KINDS = {"Stream Sync": "stream", "Event Sync": "event", "Context Sync": "device"}
# Calls that return at once whatever the GPU's state. On an H200 (CUDA 13) CUPTI files an "Event Sync"
# record under the cudaEventQuery of PyTorch's caching host allocator, which polls the events of
# earlier copies' pinned blocks when a fresh pinned tensor is made: no wait, so no host sync.
NON_BLOCKING_QUERIES = frozenset({"cudaEventQuery", "cuEventQuery", "cudaStreamQuery", "cuStreamQuery"})
_PROFILER_SITE = re.compile(r"^(?P<file>.*)\((?P<line>\d+)\): (?P<func>.*)$")


class HostSyncError(AssertionError):
    """A host sync inside a `no_host_syncs` block that is not on the allow-list."""


class NoCudaWarning(UserWarning):
    """The guard ran without a CUDA device, so it checked nothing."""


class NoCudaError(RuntimeError):
    """strict=True and no CUDA device: nothing could be checked."""


NO_CUDA_MESSAGE = ("no_host_syncs: no CUDA device, so no host sync can happen or be detected here; "
                   "nothing was checked (run this on a GPU machine to check it)")


@dataclass(frozen=True)
class HostSync:
    """One host sync, with every witness that saw it."""

    site: str  # "path/file.py:LINE function": the exact line when a witness has it (sync debug mode)
    kind: str  # stream | event | device | memcpy | pageable_copy | sync (debug mode does not say)
    witnesses: tuple  # DEBUG_MODE | CUPTI | TRACE | CAPTURE, in that order
    allowed: bool = False
    # (witness, site) for each witness: CUPTI names the enclosing function's def line
    witness_sites: tuple = ()
    reason: str = ""  # why it is allowed: the allow entry's REASON or the line's `# sync-ok: <reason>`

    @property
    def seen_by(self) -> str:
        return " + ".join(self.witnesses)

    def describe(self) -> str:
        what = {"pageable_copy": "blocking pageable copy", "sync": "sync"}.get(self.kind, f"{self.kind} sync")
        other = [f"{w} at {where}" for w, where in self.witness_sites if where != self.site]
        why = f": {self.reason}" if self.reason else " (no reason given)"
        return (f"{self.site} ({what}, seen by {self.seen_by}{'; ' + '; '.join(other) if other else ''}"
                f"{', allowed' + why if self.allowed else ''})")


def _record(site: str, kind: str, witness: str, allow: tuple) -> HostSync:
    reason = allow_reason(site, allow)
    return HostSync(site, kind, (witness,), reason is not None, ((witness, site),), reason or "")


def merged(records: Sequence[HostSync]) -> HostSync:
    """The witnesses' records of one sync as one record: the exact line where a witness has it,
    the most specific kind, every witness; allowed when any witness's site is allowed."""
    order = (DEBUG_MODE, CUPTI, TRACE, CAPTURE)
    recs = sorted(records, key=lambda r: order.index(r.witnesses[0]) if r.witnesses[0] in order else len(order))
    witness_sites = tuple(ws for r in recs for ws in r.witness_sites)
    witnesses = tuple(dict.fromkeys(w for r in recs for w in r.witnesses))
    kind = next((r.kind for r in recs if r.kind != "sync"), "sync")
    reason = next((r.reason for r in recs if r.reason), "")
    return HostSync(recs[0].site, kind, witnesses, any(r.allowed for r in recs), witness_sites, reason)


@dataclass
class SyncReport:
    syncs: list = field(default_factory=list)  # HostSync, one per host sync, in time order where known
    checked: tuple = ()  # the witnesses that ran; empty without CUDA

    @property
    def violations(self) -> list:
        return [s for s in self.syncs if not s.allowed]

    def count(self, seen_by: Optional[str] = None, allowed: Optional[bool] = None) -> int:
        """Host syncs (each once, however many witnesses saw it); `seen_by`: those a witness saw."""
        return sum(1 for s in self.syncs if (seen_by is None or seen_by in s.witnesses)
                   and (allowed is None or s.allowed == allowed))

    def first(self) -> Optional[HostSync]:
        """The first violation, preferring one sync debug mode saw (it names the exact line)."""
        v = self.violations
        return next((s for s in v if DEBUG_MODE in s.witnesses), v[0] if v else None)

    def summary(self) -> str:
        if not self.checked:
            return NO_CUDA_MESSAGE
        n = len(self.violations)
        per = ", ".join(f"{self.count(w, allowed=False)} by {w}" for w in self.checked)
        lines = [f"{n} host sync{'' if n == 1 else 's'} not allowed ({per}); {self.count(allowed=True)} allowed"]
        lines += [f"  {s.describe()}" for s in self.syncs]
        return "\n".join(lines)

    def error_message(self) -> str:
        first = self.first()
        return f"host sync at {first.site} ({first.kind}, seen by {first.seen_by})\n{self.summary()}" if first else ""


# --- allow-list -----------------------------------------------------------------------------------
_REASON_SEP = re.compile(r":\s+")  # "lib/x.py:99: why" (a site's own colon is followed by the line number)


def split_allow(entry: str) -> tuple[str, str]:
    """"PATTERN: REASON" -> (PATTERN, REASON); a PATTERN alone -> (PATTERN, "")."""
    parts = _REASON_SEP.split(entry, maxsplit=1)
    return parts[0].strip(), (parts[1].strip() if len(parts) > 1 else "")


def _source_line(site: str) -> str:
    """The text of a site's line ("path/file.py:LINE function"), from a loaded module's file whose path
    ends with the site's path (sites keep only the last two parts)."""
    where = site.partition(" ")[0]
    short, _, line = where.rpartition(":")
    if not line.isdigit() or not short:
        return ""
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None) or ""
        if f.replace("\\", "/").endswith("/" + short):
            return linecache.getline(f, int(line))
    return ""


def allow_reason(site: str, allow: Iterable[str]) -> Optional[str]:
    """Why `site` is allowed: the REASON of the first allow entry whose pattern matches ("" when it
    gives none), else the `# sync-ok: <reason>` on the site's line; None when nothing allows it."""
    where, _, func = site.partition(" ")
    for entry in allow:
        pat, reason = split_allow(entry)
        if pat == func or fnmatch.fnmatch(where, pat) or fnmatch.fnmatch(site, pat):
            return reason
    return reason_at(_source_line(site)) or None


def is_allowed(site: str, allow: Iterable[str]) -> bool:
    return allow_reason(site, allow) is not None


# --- evidence -> records (pure functions: testable with synthetic input) ---------------------------
def from_debug_sites(sites: Sequence[str], allow: Iterable[str] = ()) -> list:
    """Records from sync debug mode's sites, in the order they first fired (counts expanded)."""
    allow = tuple(allow)
    return [_record(s, "sync", DEBUG_MODE, allow) for s in sites]


def _site_from_attribution(a: str) -> str:
    m = _PROFILER_SITE.match(a)
    return f"{m['file']}:{m['line']} {m['func']}" if m else a


def _in_block(ev: pd.DataFrame) -> pd.DataFrame:
    """Events of the thread that ran the block, inside the block's range (all, if there is none)."""
    r = ev[(ev.name == GUARD_RANGE) & (ev.cat == _trace.HOST_RANGE_CAT) & (ev.ph == "X")]
    if r.empty:
        return ev
    r = r.iloc[0]
    return ev[(ev.pid == r.pid) & (ev.tid == r.tid) & (ev.ts >= r.ts) & (ev.end <= r.end)]


def unsynced_pageable_d2h(ev: pd.DataFrame) -> pd.DataFrame:
    """Host API calls of device-to-host copies into pageable memory whose innermost ATen op made no
    sync call: the copy itself blocked the host (`non_blocking=True` into pageable memory). A copy
    followed by its own sync (`.item()`, `.cpu()`) is counted as that sync instead."""
    api = ev[ev.cat.isin(_trace.HOST_API_CATS)]
    copies = ev[(ev.cat == "gpu_memcpy") & ev.name.str.contains("DtoH") & ev.name.str.contains("Pageable")]
    calls = api[api.correlation.isin(set(copies.correlation.dropna()))]
    ops = ev[ev.cat == "cpu_op"]
    syncs = api[api.name.isin(list(_syncs.SYNC_KINDS))]
    keep = []
    for i, c in calls.iterrows():
        around = ops[(ops.pid == c.pid) & (ops.tid == c.tid) & (ops.ts <= c.ts) & (ops.end >= c.end)]
        if not around.empty:
            op = around.sort_values("ts").iloc[-1]
            if ((syncs.pid == c.pid) & (syncs.tid == c.tid) & (syncs.ts >= op.ts) & (syncs.end <= op.end)).any():
                continue
        keep.append(i)
    return calls.loc[keep]


@dataclass(frozen=True)
class Sighting:
    """One witness's record of a sync in the trace, with where and when its call ran."""

    sync: HostSync
    pid: object
    tid: object
    ts: float
    end: float
    correlation: Optional[float] = None


def sightings(tr: dict, allow: Iterable[str] = ()) -> list:
    """The trace's witnesses (CUPTI sync events, synchronous memcpy calls, blocking pageable copies)
    inside the block, in time order, each attributed to its innermost Python function."""
    allow = tuple(allow)
    ev = _trace.events(tr)
    if ev.empty:
        return []
    block = _in_block(ev)
    api = block[block.cat.isin(_trace.HOST_API_CATS)]
    lo, hi = (block.ts.min(), block.end.max()) if len(block) else (0.0, 0.0)
    host = block.iloc[0] if len(block) else None
    found = []  # (ts, kind, witness, call row)
    for s in ev[ev.cat == "cuda_sync"].itertuples():
        kind = next((k for n, k in CUPTI_KINDS.items() if n in s.name), None)
        call = api[api.correlation == s.correlation]
        if not kind or (not call.empty and call.name.iloc[0] in NON_BLOCKING_QUERIES):
            continue
        if not call.empty:
            found.append((call.ts.iloc[0], kind, CUPTI, call.iloc[0]))
        elif host is not None and lo <= s.ts <= hi:
            # No runtime/driver record of the call (some driver calls are not traced): attribute by
            # the time the sync began, on the block's thread.
            found.append((s.ts, kind, CUPTI, pd.Series({"ts": s.ts, "end": s.ts, "pid": host.pid, "tid": host.tid,
                                                        "name": s.name, "correlation": None})))
    for _, c in api[api.name.map(_syncs.SYNC_KINDS) == "memcpy"].iterrows():
        found.append((c.ts, "memcpy", TRACE, c))
    pageable = unsynced_pageable_d2h(ev)
    for _, c in pageable[pageable.correlation.isin(set(api.correlation.dropna()))].iterrows():
        found.append((c.ts, "pageable_copy", TRACE, c))
    out = []
    for _, kind, witness, call in sorted(found, key=lambda f: f[0]):
        thread = ev[(ev.pid == call.pid) & (ev.tid == call.tid)]
        site = _site_from_attribution(_syncs.attribute(thread, call))
        corr = call.get("correlation")
        out.append(Sighting(_record(site, kind, witness, allow), call.pid, call.tid, float(call.ts), float(call.end),
                            None if corr is None or pd.isna(corr) else float(corr)))
    return out


def from_trace(tr: dict, allow: Iterable[str] = ()) -> list:
    """The trace's records, one per sync: sightings of one call (same correlation) merged."""
    return [s.sync for s in _merge_by_correlation(sightings(tr, allow))]


def _merge_by_correlation(seen: list) -> list:
    groups: dict = {}
    for s in seen:
        groups.setdefault(("corr", s.correlation) if s.correlation is not None else ("own", id(s)), []).append(s)
    out = []
    for g in groups.values():
        first = g[0]
        out.append(first if len(g) == 1 else Sighting(merged([s.sync for s in g]), first.pid, first.tid,
                                                      first.ts, max(s.end for s in g), first.correlation))
    return sorted(out, key=lambda s: s.ts)


def debug_marks(tr: dict) -> list:
    """(pid, tid, ts) of each DEBUG_MARK in the trace, in time order: one per sync debug mode reported."""
    ev = _trace.events(tr)
    if ev.empty:
        return []
    m = ev[(ev.name == DEBUG_MARK) & (ev.cat == _trace.HOST_RANGE_CAT)].sort_values("ts", kind="stable")
    return list(zip(m.pid, m.tid, m.ts.astype(float)))


def one_record_per_sync(debug: Sequence[HostSync], marks: Sequence[tuple], seen: Sequence[Sighting]) -> list:
    """Sync debug mode's records (in the order they fired) and the trace's sightings as one record per
    sync. The k-th debug record is the k-th mark; torch delivers the warnings when the Python call
    that synced returns, so a mark's sync is a sighting on its thread made before it and since the
    call's start: after the thread's previous mark, or, for marks of one call (no sighting between
    them, ONE_CALL_MARKS_US apart at most), after the mark before that call. Each mark takes the
    latest such sighting not yet taken.
    When the marks do not match the debug records one to one (the profiler lost some), nothing is
    merged: a sync may then be counted twice, never dropped."""
    seen = _merge_by_correlation(list(seen))
    if len(marks) != len(debug):
        return list(debug) + [s.sync for s in seen]
    taken: set = set()
    timed = []  # (ts, record)
    last_mark: dict = {}  # thread -> ts of its previous mark
    window_lo: dict = {}  # thread -> where the current call's sightings may begin
    for rec, (pid, tid, ts) in zip(debug, marks):
        thread = (pid, tid)
        on_thread = [i for i, s in enumerate(seen) if s.pid == pid and s.tid == tid and s.sync.kind != "pageable_copy"]
        prev = last_mark.get(thread, float("-inf"))
        same_call = ts - prev <= ONE_CALL_MARKS_US and not any(prev < seen[i].ts <= ts for i in on_thread)
        if not same_call or thread not in window_lo:
            window_lo[thread] = prev  # a new call since the previous mark
        last_mark[thread] = ts
        cands = [i for i in on_thread if i not in taken and window_lo[thread] <= seen[i].ts <= ts]
        if cands:
            i = max(cands, key=lambda k: seen[k].ts)
            taken.add(i)
            timed.append((seen[i].ts, merged([rec, seen[i].sync])))
        else:
            timed.append((ts, rec))
    timed += [(s.ts, s.sync) for i, s in enumerate(seen) if i not in taken]
    return [r for _, r in sorted(timed, key=lambda x: x[0])]


# --- the capture witness ----------------------------------------------------------------------------
CAPTURE_UNATTRIBUTED = "(the capture was invalidated with no line to name: a sync from this or another thread)"


def capture_error_kind(message: str) -> Optional[str]:
    """The kind of host sync a failed capture's error names ("pageable_copy" for PyTorch's refusal of
    an unpinned copy, "sync" for a call the capture forbids), or None for an error of another kind."""
    m = message.lower()
    if "captur" not in m:
        return None
    return "pageable_copy" if "pinned" in m else "sync"


def from_capture_error(exc: BaseException, allow: Iterable[str] = ()) -> Optional[HostSync]:
    """The record of a capture that `exc` failed, at the innermost line outside torch; None when
    `exc` is not a capture's error."""
    kind = capture_error_kind(str(exc))
    if kind is None:
        return None
    site = _syncs.site_of(traceback.extract_tb(exc.__traceback__))
    if site == _syncs.UNATTRIBUTED_SITE or site.split(" ")[0].startswith("dspark_lab/guard.py"):
        site = CAPTURE_UNATTRIBUTED
    return _record(site, kind, CAPTURE, tuple(allow))


@contextlib.contextmanager
def _captured(out: list, allow: tuple, mode: str) -> Iterator[None]:
    """Run the block under CUDA graph capture on a side stream; a capture error becomes a record in
    `out` (and is not raised), any other error propagates. The graph is discarded."""
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    failed = []
    with torch.cuda.stream(side):
        graph.capture_begin(capture_error_mode=mode)
        try:
            yield
        except Exception as e:  # noqa: BLE001 -- only a capture's error is turned into a record
            rec = from_capture_error(e, allow)
            if rec is None:
                raise
            failed.append(rec)
        finally:
            try:
                graph.capture_end()
            except Exception as e:  # noqa: BLE001 -- a capture invalidated without an error in the block
                if not failed:
                    failed.append(from_capture_error(e, allow) or _record(CAPTURE_UNATTRIBUTED, "sync", CAPTURE, allow))
    torch.cuda.current_stream().wait_stream(side)
    del graph
    out.extend(failed)


def with_capture(syncs: list, captured: Sequence[HostSync]) -> list:
    """The other witnesses' records with the capture's: merged into the record at the same site."""
    out = list(syncs)
    for rec in captured:
        i = next((k for k, s in enumerate(out) if s.site == rec.site), None)
        if i is None:
            out.append(rec)
        else:
            out[i] = merged([out[i], rec])
    return out


def _check_flags(allow, count, strict, capture, capture_error_mode) -> tuple:
    # A bare string would be iterated character by character, and its lone "*" would allow every
    # site: the guard would silently check nothing. strict="no" would count as true.
    if isinstance(allow, (str, bytes)) or not isinstance(allow, (list, tuple)) \
            or not all(isinstance(a, str) for a in allow):
        raise TypeError(f"allow must be a list or tuple of site patterns (strings), e.g. [\"lib/x.py:99\"]; "
                        f"got {type(allow).__name__} {allow!r:.80}")
    for name, flag in (("count", count), ("strict", strict), ("capture", capture)):
        if not isinstance(flag, bool):
            raise TypeError(f"{name} must be True or False; got {type(flag).__name__} {flag!r:.40}")
    if capture_error_mode not in CAPTURE_MODES:
        raise ValueError(f"capture_error_mode must be one of {', '.join(CAPTURE_MODES)}; got {capture_error_mode!r:.40}")
    return tuple(allow)


# --- the guard ------------------------------------------------------------------------------------
@contextlib.contextmanager
def no_host_syncs(*, allow: Iterable[str] = (), count: bool = False, strict: bool = False,
                  debug_mode: bool = True, cupti: bool = True, capture: bool = False,
                  capture_error_mode: str = "global") -> Iterator[SyncReport]:
    """Fail (HostSyncError) if the block makes a host sync that `allow` does not list.

    Yields a SyncReport, filled on exit. count=True: never fail, just fill the report.
    strict=True: raise NoCudaError without CUDA instead of warning. debug_mode / cupti: turn a
    witness off (cupti=False where another profiler is already running; it also drops the trace
    copies). capture=True: the fourth witness, the block run once under CUDA graph capture in
    `capture_error_mode` (its GPU work recorded, not run)."""
    allow = _check_flags(allow, count, strict, capture, capture_error_mode)
    report = SyncReport()
    if not torch.cuda.is_available():
        if strict:
            raise NoCudaError(NO_CUDA_MESSAGE)
        warnings.warn(NO_CUDA_MESSAGE, NoCudaWarning, stacklevel=3)
        yield report
        return
    report.checked = tuple(w for w, on in ((DEBUG_MODE, debug_mode), (CUPTI, cupti), (TRACE, cupti),
                                           (CAPTURE, capture)) if on)
    captured: list = []
    with contextlib.ExitStack() as stack:
        # Python stacks for attribution; the closing sync inside the session, outside the block's range,
        # so the copies' GPU records are complete.
        prof = (stack.enter_context(_trace.profiled(with_stack=True, profile_memory=False, sync=torch.cuda.synchronize))
                if cupti else None)
        if capture:  # entered before sync debug mode: the capture's own synchronize is not the block's
            stack.enter_context(_captured(captured, allow, capture_error_mode))
        fired: list = []  # sync debug mode's sites in firing order, each marked in the trace

        def on_sync(site: str) -> None:
            fired.append(site)
            with torch.profiler.record_function(DEBUG_MARK):
                pass
        if debug_mode:
            stack.enter_context(_syncs.sync_debug_sites(on_sync=on_sync))
        with torch.profiler.record_function(GUARD_RANGE):
            yield report
    debug = from_debug_sites(fired, allow) if debug_mode else []
    if prof is not None:
        tr = prof["trace"]
        report.syncs = one_record_per_sync(debug, debug_marks(tr), sightings(tr, allow))
    else:
        report.syncs = debug
    report.syncs = with_capture(report.syncs, captured)
    if report.violations and not count:
        raise HostSyncError(report.error_message())
