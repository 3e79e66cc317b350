"""The panel's backends declare what they can do (results.viewmodels.backend_protocol) and the
panel reads the declaration: the two backends conform to the protocols of what they declare, a
declaration that lies or names an unknown capability is refused naming it, and the panel offers a
run filter and a live worker only to a backend that declares them."""
from __future__ import annotations

import pytest

pytest.importorskip("ipywidgets")

from dspark_lab.results import Runs
from dspark_lab.results.viewmodels import backend_protocol as bp
from dspark_lab.results.viewmodels.backend import RecordedBackend
from dspark_lab.run import live
from dspark_lab.views import panel
from helpers import synthetic_runs


def recorded() -> RecordedBackend:
    rows, tl, headers = synthetic_runs()
    return RecordedBackend(Runs(rows, tl, headers))


class Plain:
    """A backend of the base protocol only, over the recorded backend's data."""

    mode = "recorded"
    capabilities = frozenset()

    def __init__(self):
        self._inner = recorded()

    def options(self):
        return self._inner.options()

    def defaults(self):
        return self._inner.defaults()

    def describe(self):
        return "plain"

    def get(self, settings, on_progress=None):
        return self._inner.get(settings, on_progress)

    def close(self):
        pass


def test_each_backend_conforms_to_the_protocol_of_what_it_declares():
    rec = recorded()
    assert bp.checked_capabilities(rec) == {bp.PICKS_RUNS} and isinstance(rec, bp.RunPickingBackend)
    lb = live.LiveBackend(measure=lambda *a, **k: None, fingerprint={"gpu": "FAKE"})
    try:
        assert bp.checked_capabilities(lb) == {bp.STREAMS} and isinstance(lb, bp.StreamingBackend)
    finally:
        lb.close()
    assert bp.checked_capabilities(panel._ErrorBackend(RuntimeError("x"))) == frozenset()


def test_a_declared_capability_without_its_methods_is_refused_naming_them():
    class Liar(Plain):
        capabilities = frozenset({bp.STREAMS})

    with pytest.raises(TypeError, match=r"Liar lacks stream, runs_real_ep, which StreamingBackend has \(it declares streams\)"):
        panel.Panel(Liar())


def test_an_unknown_capability_or_mode_is_refused_naming_the_allowed_values():
    class Unknown(Plain):
        capabilities = frozenset({"teleports"})

    class Undeclared(Plain):
        capabilities = {"streams"}  # a set, not the frozenset of the declaration

    class Moody(Plain):
        mode = "replay"

    with pytest.raises(ValueError, match="Unknown.capabilities: each must be one of picks_runs, streams; got teleports"):
        bp.checked_capabilities(Unknown())
    with pytest.raises(TypeError, match="Undeclared.capabilities must be a frozenset of picks_runs, streams"):
        bp.checked_capabilities(Undeclared())
    with pytest.raises(ValueError, match="Moody.mode must be one of recorded, live; got 'replay'"):
        bp.checked_capabilities(Moody())


def test_a_backend_missing_a_base_member_is_refused_naming_it():
    bare = type("Bare", (), {"mode": "recorded", "capabilities": frozenset(), "describe": lambda self: ""})
    with pytest.raises(TypeError, match=r"Bare lacks options, defaults, get, close, which PanelBackend has$"):
        bp.checked_capabilities(bare())


def test_the_panel_offers_a_run_filter_and_a_worker_only_where_declared():
    """The same data: a run filter with PICKS_RUNS, none without; no live worker for either."""
    picking, plain = panel.Panel(recorded()), panel.Panel(Plain())
    try:
        assert picking.run_filter is not None and plain.run_filter is None
        assert picking._worker is None and plain._worker is None and plain.live is None
        assert "run" in plain.controls  # the data's run option stays a control; only filtering is declared
        assert not plain.error.value, plain.error.value
    finally:
        picking.close()
        plain.close()
