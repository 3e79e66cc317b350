"""What the panel asks of a backend, as typing.Protocols, and what each backend declares it can do.

Every backend is a PanelBackend: it offers control values, defaults, a sentence on where its data
comes from, one point's data per setting, and close(). Beyond that a backend declares its
capabilities in a class attribute `capabilities` (a frozenset of the names below); the panel reads
that declaration and never probes for methods:

  PICKS_RUNS  RunPickingBackend: a run dropdown over recorded runs, options per run, a run filter
              (results.viewmodels.backend.RecordedBackend).
  STREAMS     StreamingBackend: a setting measured now and streamed as its trials arrive, on a
              worker thread that a newer setting cancels; some EP sizes on real ranks
              (run.live.LiveBackend).

`mode` says in words what the data is ("recorded" or "live": the panel's banner and error titles).
`checked_capabilities(backend)` is the one place the declaration is read and verified.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, FrozenSet, Optional, Protocol, runtime_checkable

import pandas as pd

PICKS_RUNS = "picks_runs"
STREAMS = "streams"
CAPABILITIES = (PICKS_RUNS, STREAMS)
MODES = ("recorded", "live")


@dataclass
class PointData:
    """What a backend returns for one setting: rows of every strategy (one point per run)."""

    rows: pd.DataFrame
    timelines: pd.DataFrame
    note: str = ""  # e.g. "nearest recorded point: ... (asked batch 10)"
    settings: dict = field(default_factory=dict)


@runtime_checkable
class PanelBackend(Protocol):
    """What every panel backend has."""

    mode: str  # one of MODES
    capabilities: FrozenSet[str]  # a subset of CAPABILITIES

    def options(self) -> dict:
        """{control: the values it offers}: ep_size, batch_size, gamma, strategy, workload (+ run, dispatch)."""

    def defaults(self) -> dict:
        """{control: the value the panel opens on}."""

    def describe(self) -> str:
        """One sentence on where the data comes from (the panel's banner)."""

    def get(self, settings: dict, on_progress: Optional[Callable] = None) -> PointData:
        """The data of one setting."""

    def close(self) -> None:
        """Release what the backend holds (threads, processes); nothing for recorded data."""


@runtime_checkable
class RunPickingBackend(PanelBackend, Protocol):
    """PICKS_RUNS: recorded runs to choose among, narrowed by a filter."""

    selection: list  # run ids the filter keeps, in the order listed
    max_options: int  # runs listed in the dropdown

    def options(self, run: Optional[str] = None) -> dict:
        """The controls' values over the points `run` holds, "run" among them."""

    def filter_runs(self, text: str) -> str:
        """Narrow the selection by `text`; a sentence saying what it kept. ValueError on a bad filter."""

    def selection_note(self) -> str:
        """A sentence on the current selection."""


@runtime_checkable
class StreamingBackend(PanelBackend, Protocol):
    """STREAMS: a setting measured now, its updates streamed to `on_update` until complete."""

    def stream(self, settings: dict, on_update: Optional[Callable[[Any], None]] = None,
               on_progress: Optional[Callable] = None, cancel: Optional[threading.Event] = None) -> Any:
        """Measure `settings`, calling `on_update` with each update; the complete update returned."""

    def runs_real_ep(self, ep_size: int) -> bool:
        """Whether this EP size runs on real ranks (the panel then offers dispatch and per-rank figures)."""


_PROTOCOL_OF = {PICKS_RUNS: RunPickingBackend, STREAMS: StreamingBackend}


def checked_capabilities(backend) -> frozenset:
    """The capabilities `backend` declares, verified: TypeError or ValueError naming the attribute,
    the allowed values, or the members a declared capability lacks."""
    name = type(backend).__name__
    mode = getattr(backend, "mode", None)
    if mode not in MODES:
        raise ValueError(f"{name}.mode must be one of {', '.join(MODES)}; got {mode!r}")
    caps = getattr(backend, "capabilities", None)
    if not isinstance(caps, frozenset):
        raise TypeError(f"{name}.capabilities must be a frozenset of {', '.join(CAPABILITIES)} (empty: none); "
                        f"got {caps!r}")
    unknown = sorted(caps - set(CAPABILITIES))
    if unknown:
        raise ValueError(f"{name}.capabilities: each must be one of {', '.join(CAPABILITIES)}; got {', '.join(unknown)}")
    for cap in (None, *sorted(caps)):
        protocol = _PROTOCOL_OF.get(cap, PanelBackend)
        if not isinstance(backend, protocol):
            missing = [m for m in _members(protocol) if not hasattr(backend, m)]
            raise TypeError(f"{name} lacks {', '.join(missing)}, which {protocol.__name__} has"
                            + (f" (it declares {cap})" if cap else ""))
    return caps


def _members(protocol) -> list[str]:
    """The attributes and methods a protocol asks for (its own and its bases')."""
    names = []
    for klass in reversed(protocol.__mro__):
        if klass is object or klass is Protocol or not getattr(klass, "_is_protocol", False):
            continue
        names += [n for n in (*getattr(klass, "__annotations__", {}), *vars(klass))
                  if not n.startswith("_") and n not in names]
    return names
