"""A Chrome-trace file the kit did not make (torch.profiler / Kineto export, `.json` or `.json.gz`),
read as the kit's trace frame (the columns of measure.trace.events), streamed and bounded.

The file is never parsed whole: its text is decoded chunk by chunk (gzip streamed too) and the
`traceEvents` array is read one event at a time (json's raw_decode on a sliding buffer), so memory
holds the events the kit reads, slimmed to the fields it reads, not the file's text or its other
events (flows, counters, metadata). Each bound is said in one line when passed (TraceFileError):
a file that is not regular, not UTF-8 JSON, not a trace, cut short, an event larger than
MAX_EVENT_CHARS, more than MAX_EVENTS events kept, or nested too deep.

Events that cannot be read as events (no numeric ts, a complete event without its duration, a
negative duration) are left out and counted by reason (`dropped`), never guessed. HIP calls
(an AMD trace) are read under the names of their CUDA counterparts (HIP_AS_CUDA), so the kit's
one rule reads both; their original names are kept in `renamed`. A correlation id that a float
column cannot hold exactly (a 64-bit id, a string) is renumbered below zero, so ids above 2**53
stay apart.
"""
from __future__ import annotations

import codecs
from array import array
import gzip
import json
import math
import os
import re
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator, Optional

import numpy as np
import pandas as pd

from dspark_lab.printable import printable
from dspark_lab.measure.trace import GPU_CATS, HOST_API_CATS, HOST_RANGE_CAT
from dspark_lab.results.record.regular_files import open_regular

CHUNK_BYTES = 1 << 20
MAX_EVENT_CHARS = 16 << 20  # one event's JSON text (a Python stack of a deep call is a few KiB)
MAX_META_CHARS = 64 << 20  # one top-level value other than traceEvents (deviceProperties, distributedInfo)
MAX_EVENTS = 30_000_000  # events kept (a 1 GB Kineto trace holds a few million)
KEPT_CATS = frozenset(GPU_CATS + HOST_API_CATS + ("cpu_op", HOST_RANGE_CAT, "gpu_user_annotation", "python_function",
                                                  "cuda_sync"))
# Older Kineto exports (torch 1.8-1.10) named the categories differently.
LEGACY_CATS = {"Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset", "Runtime": "cuda_runtime",
               "Operator": "cpu_op", "Python": "python_function"}
MEMORY_EVENT = "[memory]"  # an allocator instant event: counted by measure.syncs.counts_per_step
HIP_AS_CUDA = {
    "hipLaunchKernel": "cudaLaunchKernel", "hipExtLaunchKernel": "cudaLaunchKernel",
    "hipExtModuleLaunchKernel": "cuLaunchKernel", "hipModuleLaunchKernel": "cuLaunchKernel",
    "hipGraphLaunch": "cudaGraphLaunch", "hipMemcpyAsync": "cudaMemcpyAsync", "hipMemsetAsync": "cudaMemsetAsync",
    "hipMemcpy": "cudaMemcpy", "hipMemcpyWithStream": "cudaMemcpy",  # returns after the copy ran: a blocking copy
    "hipStreamSynchronize": "cudaStreamSynchronize", "hipDeviceSynchronize": "cudaDeviceSynchronize",
    "hipEventSynchronize": "cudaEventSynchronize", "hipStreamWaitEvent": "cudaStreamWaitEvent",
    "hipEventRecord": "cudaEventRecord",
}
COLUMNS = ["name", "cat", "ph", "ts", "dur", "end", "pid", "tid", "correlation", "bytes", "device_type", "args", "stream"]
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()
NAN = float("nan")
_NO_ARGS: dict = {}  # one shared empty args: the kit reads its columns, not the raw args


class TraceFileError(ValueError):
    """A file that cannot be read as a Chrome trace: the message is one line naming the file and why."""


@dataclass
class ForeignTrace:
    path: str
    events: pd.DataFrame
    meta: dict = field(default_factory=dict)  # the top-level fields other than traceEvents
    thread_names: dict = field(default_factory=dict)  # (pid, tid) as strings -> the trace's thread name
    dropped: Counter = field(default_factory=Counter)  # reason -> events left out
    renamed: dict = field(default_factory=dict)  # the kit's name -> the trace's (HIP calls)
    total_events: int = 0  # every element of traceEvents read


class _Text:
    """The file's text as a sliding buffer over a stream of decoded chunks."""

    def __init__(self, chunks: Iterator[str]):
        self.chunks, self.buf, self.pos, self.offset, self.eof = chunks, "", 0, 0, False

    def fill(self) -> bool:
        if self.eof:
            return False
        chunk = next(self.chunks, None)
        if chunk is None:
            self.eof = True
            return False
        self.buf, self.offset, self.pos = self.buf[self.pos:] + chunk, self.offset + self.pos, 0
        return True

    def peek(self) -> Optional[str]:
        """The next character that is not white space (None at the end of the file)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill():
                return None

    def expect(self, chars: str, what: str) -> str:
        c = self.peek()
        if c is None or c not in chars:
            got = "the end of the file" if c is None else repr(c)
            raise ValueError(f"expected {what} at character {self.offset + self.pos}; got {got}")
        self.pos += 1
        return c

    def value(self, limit: int, what: str):
        """The next JSON value, read whole (a value longer than `limit` characters is refused)."""
        self.peek()
        while True:
            try:
                v, end = _DECODER.raw_decode(self.buf, self.pos)
                if end < len(self.buf) or self.eof:  # a number at the buffer's end may go on
                    self.pos = end
                    return v
            except json.JSONDecodeError as e:
                if self.eof:
                    raise ValueError(f"{what} at character {self.offset + self.pos} is not valid JSON ({e.msg})"
                                     + (": the file is cut short" if e.pos >= len(self.buf) - 1 else "")) from None
                if len(self.buf) - self.pos > limit:
                    raise ValueError(f"{what} at character {self.offset + self.pos} is not valid JSON within "
                                     f"{limit} characters ({e.msg})") from None
            self.fill()


def _chunks(f, gz: bool) -> Iterator[str]:
    raw = gzip.GzipFile(fileobj=f, mode="rb") if gz else f
    dec = codecs.getincrementaldecoder("utf-8")("strict")
    while True:
        b = raw.read(CHUNK_BYTES)
        if not b:
            yield dec.decode(b"", final=True)
            return
        yield dec.decode(b)


def _number(v) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


class _Columns:
    """The kept events, column by column (names interned once), with what was left out."""

    def __init__(self):
        # numbers in typed arrays (8 bytes an event each, no object per value), text as interned strings
        self.nums = {c: array("d") for c in ("ts", "dur", "correlation", "bytes", "device_type", "stream")}
        self.cols = {c: [] for c in ("name", "cat", "ph", "pid", "tid")}
        self.correlations: dict = {}
        self.strings: dict = {}
        self.dropped: Counter = Counter()
        self.renamed: dict = {}
        self.thread_names: dict = {}
        self.total = 0

    def _str(self, v) -> str:
        s = v if isinstance(v, str) else str(v)
        return self.strings.setdefault(s, s)

    def add(self, e) -> None:
        self.total += 1
        if not isinstance(e, dict):
            self.dropped["an element of traceEvents that is not an object"] += 1
            return
        ph = e.get("ph")
        if ph == "M":
            self._metadata(e)
            return
        if ph not in ("X", "i", "I"):
            return  # flows, counters, async events: not read by the kit
        cat, name = e.get("cat"), e.get("name")
        cat = LEGACY_CATS.get(cat, cat) if isinstance(cat, str) else cat
        if cat not in KEPT_CATS and not (ph != "X" and name == MEMORY_EVENT):
            return
        self._keep(e, "X" if ph == "X" else "i", cat, name)

    def _metadata(self, e: dict) -> None:
        args = e.get("args")
        if e.get("name") == "thread_name" and isinstance(args, dict) and isinstance(args.get("name"), str):
            self.thread_names[(self._str(e.get("pid")), self._str(e.get("tid")))] = args["name"][:200]

    def _keep(self, e: dict, ph: str, cat, name) -> None:
        ts, dur = _number(e.get("ts")), _number(e.get("dur", 0.0 if ph == "i" else None))
        if ts is None or not isinstance(name, str):
            self.dropped["no numeric ts or no name"] += 1
            return
        if dur is None:
            self.dropped["a complete event ('X') without a numeric duration: truncated"] += 1
            return
        if dur < 0:
            self.dropped["a negative duration"] += 1
            return
        if len(self.nums["ts"]) >= MAX_EVENTS:
            raise ValueError(f"more than {MAX_EVENTS} events the kit reads: cut the trace to fewer steps")
        args = e.get("args") if isinstance(e.get("args"), dict) else _NO_ARGS
        if name in HIP_AS_CUDA and cat in HOST_API_CATS:
            self.renamed[HIP_AS_CUDA[name]] = name
            name = HIP_AS_CUDA[name]
        c, n = self.cols, self.nums
        c["name"].append(self._str(name))
        c["cat"].append(self._str(cat))
        c["ph"].append(ph)
        c["pid"].append(self._str(e.get("pid")))
        c["tid"].append(self._str(e.get("tid")))
        n["ts"].append(ts)
        n["dur"].append(dur if ph == "X" else 0.0)
        n["correlation"].append(self._correlation(args.get("correlation")))
        nbytes = _number(args.get("Bytes", args.get("bytes")))
        n["bytes"].append(NAN if nbytes is None else nbytes)
        dt, st = args.get("Device Type"), args.get("stream")
        n["device_type"].append(float(dt) if isinstance(dt, int) and not isinstance(dt, bool) and abs(dt) < 2**53 else NAN)
        n["stream"].append(float(st) if isinstance(st, int) and not isinstance(st, bool) and abs(st) < 2**53 else NAN)

    def _correlation(self, v) -> float:
        """The id as a float the kit's column holds exactly: a small non-negative integer as itself,
        any other (a 64-bit id, a string) renumbered below zero, one number per distinct id."""
        if isinstance(v, bool) or not isinstance(v, (int, str)):
            return NAN
        if isinstance(v, int) and 0 <= v < 2**53:
            return float(v)
        return float(-1 - self.correlations.setdefault(v, len(self.correlations)))

    def frame(self) -> pd.DataFrame:
        """The kit's frame, in time order; the columns are given up as they are built (one copy at a time)."""
        df = pd.DataFrame({c: np.frombuffer(a, dtype=float) if len(a) else np.empty(0) for c, a in self.nums.items()})
        for c in list(self.cols):  # text even when empty (the kit reads them with .str)
            df[c] = pd.Series(self.cols.pop(c), dtype=object)
        self.nums = {}
        df["end"] = df.ts + df.dur
        df["args"] = [_NO_ARGS] * len(df)
        order = np.argsort(df.ts.to_numpy(), kind="stable")
        if (order != np.arange(len(order))).any():
            df = df.take(order)
        return df[COLUMNS].reset_index(drop=True)


def _events_array(text: _Text, cols: _Columns) -> None:
    text.expect("[", "the traceEvents array '['")
    if text.peek() == "]":
        text.pos += 1
        return
    while True:
        cols.add(text.value(MAX_EVENT_CHARS, f"event {cols.total}"))
        c = text.peek()
        if c is None:
            raise ValueError(f"the file ends inside traceEvents after {cols.total} events: it is cut short")
        if text.expect(",]", "',' or ']' after an event") == "]":
            return


def _top_object(text: _Text, cols: _Columns) -> dict:
    meta: dict = {}
    seen_events = False
    text.expect("{", "'{'")
    if text.peek() == "}":
        text.pos += 1
    else:
        while True:
            key = text.value(MAX_META_CHARS, "a top-level key")
            if not isinstance(key, str):
                raise ValueError("a top-level key is not a string")
            text.expect(":", "':'")
            if key == "traceEvents":
                _events_array(text, cols)
                seen_events = True
            else:
                meta[key] = text.value(MAX_META_CHARS, f"the top-level field {printable(key[:40])!r}")
            if text.expect(",}", "',' or '}'") == "}":
                break
    if not seen_events:
        raise ValueError("no traceEvents array: not a Chrome trace")
    return meta


def _parse(text: _Text, cols: _Columns) -> dict:
    first = text.peek()
    if first == "[":  # the JSON Array Format: the events alone
        _events_array(text, cols)
        meta: dict = {}
    elif first == "{":
        meta = _top_object(text, cols)
    else:
        raise ValueError("not a Chrome trace: it starts with neither '{' nor '['")
    if text.peek() is not None:
        raise ValueError(f"more text after the trace's end, at character {text.offset + text.pos}")
    return meta


def read(path) -> ForeignTrace:
    """The trace at `path` (gzip by its first bytes, whatever its name), or TraceFileError."""
    cols = _Columns()
    try:
        with open_regular(path) as f:
            gz = f.read(2) == b"\x1f\x8b"
            f.seek(0)
            meta = _parse(_Text(_chunks(f, gz)), cols)
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        why = e.strerror if isinstance(e, OSError) and e.strerror else (str(e) or type(e).__name__)
        raise TraceFileError(f"{os.fspath(path)}: cannot be read as a trace: {why}") from None
    except UnicodeDecodeError:
        raise TraceFileError(f"{os.fspath(path)}: not UTF-8 text (nor gzip): not a Chrome trace") from None
    except RecursionError:
        raise TraceFileError(f"{os.fspath(path)}: JSON nested too deep to be a trace event") from None
    except ValueError as e:
        raise TraceFileError(f"{os.fspath(path)}: {str(e).splitlines()[0] if str(e) else 'not a Chrome trace'}") from None
    return ForeignTrace(os.fspath(path), cols.frame(), meta if isinstance(meta, dict) else {}, cols.thread_names,
                        cols.dropped, cols.renamed, cols.total)
