"""Serve one read-back site's value from a recorded warm-up step, without a sync: the experiment that
bounds what removing that read can buy, before a fix is written.

`ReadStub` wraps, while it is entered, the calls through which a step reads a device value on the host
or waits for the device: `Tensor.item/tolist/cpu/nonzero/repeat_interleave`, `bool()/int()/float()`
and `range()`-style index use of a tensor, `Tensor.to` to the host (and from it), indexing with a
boolean device mask, `Tensor.copy_` from the device into host memory that is pageable or blocking,
`torch.tensor(..., device=)`, `torch.repeat_interleave` without `output_size`, and the explicit
`torch.cuda.synchronize` / `Stream.synchronize` / `Event.synchronize`. Each call is named by its site,
"path/file.py:LINE function" of the innermost frame outside torch (the guard's and sync debug mode's
naming, measure.syncs.site_path). Three modes:

  record   every such call runs and its result is kept per site, in call order, per step;
  serve    at the one `target` site the k-th call of a step returns the k-th value recorded
           (a Python value as is, a tensor cloned: a device tensor by a device copy, no sync;
           a wait returns at once); every other call runs for real;
  pass     nothing is looked at (outside a measurement).

Both arms of a headroom measurement (the real step and the stubbed one) run in serve mode, so the
wrappers' own cost is paid by both and cancels in their difference. A served value is the warm-up's:
the stubbed step computes with it, so its outputs are not the real step's; only its time is used.
A read made inside a torch operation (a tensor passed where a number is expected) makes no Python
call here and cannot be served.
"""
from __future__ import annotations

import copy
import functools
import sys
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import torch

from dspark_lab.measure import syncs

PASS, RECORD, SERVE = "pass", "record", "serve"
_SKIP = syncs._TORCH_PATH_PARTS  # the frames sync debug mode skips to name a site (torch, the kit's measure/)
_ACTIVE: list = []  # the entered ReadStub (one at a time)
_MISSING = object()


def caller_site(skip: tuple = _SKIP) -> str:
    """"path/file.py:LINE function" of the innermost frame outside `skip` (default: torch and the kit's
    measure/ code, as sync debug mode names sites)."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not any(p in name for p in skip):
            return f"{syncs.site_path(name)}:{f.f_lineno} {f.f_code.co_name}"
        f = f.f_back
    return syncs.UNATTRIBUTED_SITE


@dataclass(frozen=True)
class Read:
    """One site's reads over the recorded steps."""

    site: str
    kind: str  # the call: item, tolist, bool, int, float, index, cpu, to_host, upload, nonzero, mask, copy_to_host, repeat_interleave, sync
    per_step: float  # calls per step
    values: tuple  # the last recorded step's results, in call order
    varies: bool  # the values differed between recorded steps
    shape_varies: bool  # a tensor result's shape (or the number of calls) differed between recorded steps

    def unservable(self) -> str:
        """Why its recorded value cannot stand in for it ("" when it can)."""
        if self.shape_varies:
            return ("its result's shape (or how often it is called) changes from step to step: a recorded "
                    "value would change the shapes of what follows")
        return ""


def _keep(out):
    if isinstance(out, torch.Tensor):
        return out.detach().clone()
    if isinstance(out, tuple):
        return tuple(_keep(x) for x in out)
    return copy.deepcopy(out)


def _same(a, b) -> tuple[bool, bool]:
    """(equal values, equal shapes) of two recorded results."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False, False
        return bool(torch.equal(a.cpu(), b.cpu())), True
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        pairs = [_same(x, y) for x, y in zip(a, b)]
        return all(p[0] for p in pairs), all(p[1] for p in pairs)
    return a == b, type(a) is type(b) and (not isinstance(a, list) or len(a) == len(b))


class ReadStub:
    """Enter to wrap the read calls; `record` warm-up steps, then `step(fn, site)` serves `site`."""

    def __init__(self, devices: Iterable[str] = ("cuda",)):
        # the device types whose tensors count as device values (("cpu",) lets CPU tests stand in)
        self.devices = frozenset(devices)
        self.mode, self.target = PASS, None
        self._steps: list = []  # per recorded step: {site: [(kind, value), ...]}
        self._served: dict = {}  # site -> recorded values, in call order
        self._calls: dict = {}  # site -> calls so far in this step
        self.overflow: dict = {}  # site -> calls served for real because the warm-up recorded fewer
        self._inside = False
        self._saved: list = []

    def __enter__(self) -> "ReadStub":
        if _ACTIVE:
            raise RuntimeError("a ReadStub is already entered; one at a time")
        _ACTIVE.append(self)
        self._saved = _install()
        return self

    def __exit__(self, *exc) -> None:
        _uninstall(self._saved)
        _ACTIVE.clear()
        self.mode = PASS

    def on(self, t) -> bool:
        return isinstance(t, torch.Tensor) and t.device.type in self.devices

    def record(self, fn: Callable[[], object], steps: int = 2) -> dict:
        """Run `steps` steps recording every read; {site: Read}."""
        self.mode, self._steps = RECORD, []
        try:
            for _ in range(steps):
                self._steps.append({})
                fn()
        finally:
            self.mode = PASS
        return self.reads()

    def reads(self) -> dict:
        if not self._steps:
            return {}
        out = {}
        last = self._steps[-1]
        for site in dict.fromkeys(s for st in self._steps for s in st):
            seqs = [st.get(site, []) for st in self._steps]
            varies, shape_varies = False, len({len(q) for q in seqs}) > 1
            for q in seqs[1:]:
                for (_, a), (_, b) in zip(seqs[0], q):
                    eq, shape = _same(a, b)
                    varies, shape_varies = varies or not eq, shape_varies or not shape
            vals = last.get(site, [])
            kind = (vals or next(q for q in seqs if q))[0][0]
            out[site] = Read(site, kind, sum(len(q) for q in seqs) / len(seqs), tuple(v for _, v in vals),
                             varies or shape_varies, shape_varies)
        return out

    def step(self, fn: Callable[[], object], site: Optional[str]) -> Callable[[], object]:
        """A step that serves `site` from the recording (None: serves nothing; the real arm)."""
        if site is not None and site not in self._served:
            self.mode = PASS  # comparing the recorded values reads them back: not through the wrappers
            self._served[site] = list(self.reads()[site].values)

        def stepped():
            self.mode, self.target = SERVE, site
            self._calls.clear()
            return fn()
        return stepped

    def handle(self, kind: str, site: str, orig: Callable, args: tuple, kwargs: dict, serve: Callable):
        if self.mode == RECORD:
            self._inside = True
            try:
                out = orig(*args, **kwargs)
            finally:
                self._inside = False
            self._steps[-1].setdefault(site, []).append((kind, _keep(out)))
            return out
        if site != self.target:
            return orig(*args, **kwargs)
        vals = self._served.get(site, [])
        i = self._calls.get(site, 0)
        self._calls[site] = i + 1
        if i >= len(vals):
            self.overflow[site] = self.overflow.get(site, 0) + 1
            return orig(*args, **kwargs)
        return serve(vals[i], args, orig)


# --- the wrapped calls: which calls are reads, and how a recorded value is served -------------------------
def _value(v, args, orig):
    return copy.deepcopy(v) if isinstance(v, list) else v


def _tensor(v, args, orig):
    return tuple(x.clone() for x in v) if isinstance(v, tuple) else v.clone()


def _into_dst(v, args, orig):
    return orig(args[0], v)  # the recorded host value into the destination: a host copy, no device


def _nothing(v, args, orig):
    return None


def _device_of(args, kwargs) -> Optional[torch.device]:
    """Where `Tensor.to(...)` sends the tensor (None: it keeps its device)."""
    d = kwargs.get("device")
    for a in args[1:]:
        if d is not None:
            break
        if isinstance(a, (str, torch.device)):
            d = a
        elif isinstance(a, torch.Tensor):
            d = a.device
    return None if d is None else torch.device(d)


def _to_kind(st: ReadStub, args, kwargs) -> Optional[str]:
    dst = _device_of(args, kwargs)
    src = args[0]
    if dst is None or not isinstance(src, torch.Tensor):
        return None
    if st.on(src) and dst.type == "cpu":
        return "to_host"
    non_blocking = kwargs.get("non_blocking", any(a is True for a in args[1:]))
    if src.device.type == "cpu" and dst.type != "cpu" and dst.type in st.devices \
            and not (non_blocking and src.is_pinned()):  # a pinned non-blocking upload makes no wait
        return "upload"
    return None


def _mask_kind(st: ReadStub, args, kwargs) -> Optional[str]:
    idx = args[1] if len(args) > 1 else None
    parts = idx if isinstance(idx, tuple) else (idx,)
    return "mask" if any(st.on(p) and p.dtype == torch.bool for p in parts) else None


def _copy_kind(st: ReadStub, args, kwargs) -> Optional[str]:
    dst, src = args[0], args[1] if len(args) > 1 else kwargs.get("src")
    if not (isinstance(src, torch.Tensor) and st.on(src) and src.device.type != "cpu" and dst.device.type == "cpu"):
        return None
    non_blocking = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
    return "copy_to_host" if not (non_blocking and dst.is_pinned()) else None


def _tensor_kind(st: ReadStub, args, kwargs) -> Optional[str]:
    d = kwargs.get("device")
    return "upload" if d is not None and torch.device(d).type in st.devices - {"cpu"} else None


def _repeat_kind(st: ReadStub, args, kwargs) -> Optional[str]:
    reps = args[1] if len(args) > 1 else kwargs.get("repeats", args[0] if args else None)
    return "repeat_interleave" if kwargs.get("output_size") is None and st.on(reps) else None


def _sync_kind(st: ReadStub, args, kwargs) -> Optional[str]:
    return "sync" if "cuda" in st.devices else None


def _self_kind(kind: str) -> Callable:
    return lambda st, args, kwargs: kind if args and st.on(args[0]) else None


_TENSOR_READS = {  # torch.Tensor attribute -> (is it a read: kind or None, how it is served)
    "item": (_self_kind("item"), _value), "tolist": (_self_kind("tolist"), _value),
    "__bool__": (_self_kind("bool"), _value), "__int__": (_self_kind("int"), _value),
    "__float__": (_self_kind("float"), _value), "__index__": (_self_kind("index"), _value),
    "cpu": (_self_kind("cpu"), _tensor), "to": (_to_kind, _tensor), "nonzero": (_self_kind("nonzero"), _tensor),
    "__getitem__": (_mask_kind, _tensor), "copy_": (_copy_kind, _into_dst),
    "repeat_interleave": (_repeat_kind, _tensor),
}
_MODULE_READS = (  # (owner, attribute, kind of call, serve)
    (torch, "tensor", _tensor_kind, _tensor), (torch, "repeat_interleave", _repeat_kind, _tensor),
    (torch.cuda, "synchronize", _sync_kind, _nothing), (torch.cuda.Stream, "synchronize", _sync_kind, _nothing),
    (torch.cuda.Event, "synchronize", _sync_kind, _nothing),
)


def _wrapper(orig: Callable, kind_of: Callable, serve: Callable) -> Callable:
    @functools.wraps(orig)
    def wrapped(*args, **kwargs):
        st = _ACTIVE[0] if _ACTIVE else None
        if st is None or st.mode == PASS or st._inside:
            return orig(*args, **kwargs)
        kind = kind_of(st, args, kwargs)
        if kind is None:
            return orig(*args, **kwargs)
        return st.handle(kind, caller_site(), orig, args, kwargs, serve)
    return wrapped


def _install() -> list:
    """Wrap every read call; what to put back (owner, name, the attribute as it was, or _MISSING)."""
    saved = []
    targets = [(torch.Tensor, n, k, s) for n, (k, s) in _TENSOR_READS.items()] + list(_MODULE_READS)
    for owner, name, kind_of, serve in targets:
        had = owner.__dict__.get(name, _MISSING)
        saved.append((owner, name, had))
        setattr(owner, name, _wrapper(getattr(owner, name), kind_of, serve))
    return saved


def _uninstall(saved: list) -> None:
    for owner, name, had in reversed(saved):
        if had is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, had)
