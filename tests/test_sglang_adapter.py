"""The optional SGLang adapter.

Without sglang (the lab's normal env) only the absence behaviour and the pure field checker are
tested. The tests marked `sglang` run against an installed sglang==0.5.23 in its own venv:
`bash scripts/sglang_env.sh`; elsewhere they are skipped, saying why.
"""
from __future__ import annotations

import sys
import warnings

import pytest
import torch

from dspark_lab.model import sglang_adapter as sa
from dspark_lab import strategies
from dspark_lab.model.draft import DraftForwardBatch
from dspark_lab.predicate import MOE_A2A_BACKENDS, ParallelSettings

with warnings.catch_warnings():  # sglang warns at import on a CPU-only machine (AWQ, GGUF, Triton)
    warnings.simplefilter("ignore")
    _REASON = sa.absent_reason()

requires_sglang = pytest.mark.skipif(bool(_REASON), reason=f"needs an importable sglang: {_REASON}")
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


# -- (a) absence, simulated even where sglang is installed -----------------------------------
@pytest.fixture
def no_sglang(monkeypatch):
    monkeypatch.setitem(sys.modules, "sglang", None)  # `import sglang` now raises ImportError


def test_absence_is_reported_cleanly(no_sglang):
    assert sa.available() is False
    reason = sa.absent_reason()
    assert "sglang is not installed" in reason
    assert "pip install -e .[sglang]" in reason
    assert "environment of its own" in reason


@pytest.mark.parametrize(
    "call",
    [
        lambda: sa.make_num_token_non_padded(8, "cpu", ParallelSettings(ep_size=2)),
        lambda: sa.enable_num_token_non_padded(ParallelSettings()),
        lambda: sa.sglang_version(),
        lambda: sa.register_strategy(),
        lambda: sa.make_num_token_non_padded_source(),
        lambda: sa.run_forward_fields(),
        lambda: sa.conformance_report(),
    ],
    ids=["make", "predicate", "version", "register", "source", "fields", "report"],
)
def test_every_sglang_call_raises_the_reason_when_absent(no_sglang, call):
    with pytest.raises(RuntimeError) as e:
        call()
    assert str(e.value) == sa.absent_reason()
    assert "pip install -e .[sglang]" in str(e.value)


def test_absence_registers_nothing(no_sglang):
    with pytest.raises(RuntimeError):
        sa.register_strategy()
    assert sa.STRATEGY_NAME not in strategies.names()


def test_an_import_error_inside_sglang_is_named(monkeypatch):
    """An installed sglang whose module fails to import: the reason names the module and error."""
    real = sa.importlib.import_module

    def broken(name, *a, **k):
        if name == sa.FORWARD_BATCH_INFO:
            raise RuntimeError("no CUDA driver found")
        return real(name, *a, **k)

    import types

    monkeypatch.setitem(sys.modules, "sglang", types.ModuleType("sglang"))
    monkeypatch.setattr(sa.importlib, "import_module", broken)
    for name in (sa.RUNTIME_CONTEXT, sa.MOE_UTILS):  # let the modules before it "import"
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    reason = sa.absent_reason()
    assert sa.FORWARD_BATCH_INFO in reason and "no CUDA driver found" in reason
    assert not sa.available()


# -- the pure field checker (no sglang needed) -----------------------------------------------
SGLANG_0_5_23_LIKE = tuple(
    sa.FIELD_ALIASES.get(f, f) for f in DraftForwardBatch.field_names()
)  # the lab's record renamed as 0.5.23 names it


def test_checker_accepts_known_aliases():
    c = sa.compare_fields(DraftForwardBatch.field_names(), SGLANG_0_5_23_LIKE)
    assert c.conformant and c.drift_messages() == []
    assert dict(c.aliased) == sa.FIELD_ALIASES
    assert any("global_num_token_non_padded" in n for n in c.alias_notes())


def test_checker_accepts_the_unrenamed_names_too():
    """Releases before the rename pass the lab's own names: still conformant, no alias used."""
    c = sa.compare_fields(DraftForwardBatch.field_names(), DraftForwardBatch.field_names())
    assert c.conformant and c.aliased == ()


def test_checker_names_missing_and_extra_fields():
    sgl = [f for f in SGLANG_0_5_23_LIKE if f != "positions"] + ["mrope_positions"]
    msgs = sa.compare_fields(DraftForwardBatch.field_names(), sgl).drift_messages()
    assert len(msgs) == 2
    assert any("'positions'" in m and "does not pass" in m for m in msgs)
    assert any("'mrope_positions'" in m and "lacks" in m for m in msgs)


def test_checker_reports_a_dropped_alias_target_as_drift():
    sgl = [f for f in SGLANG_0_5_23_LIKE if f != "global_num_token_non_padded_cpu"]
    (msg,) = sa.compare_fields(DraftForwardBatch.field_names(), sgl).drift_messages()
    assert "'num_token_non_padded_cpu'" in msg and "known alias 'global_num_token_non_padded_cpu'" in msg


def test_forward_batch_keywords_parses_calls_with_ast():
    src = '''
class P:
    def _run_forward(self, bs):
        x = helper(a=1)
        fb = ForwardBatch(forward_mode=M, batch_size=bs, **extra)
        return mod.ForwardBatch(batch_size=bs, spec_info=None)
    def other(self):
        return ForwardBatch(not_this=1)
'''
    assert sa.forward_batch_keywords(src) == ("forward_mode", "batch_size", "spec_info")
    with pytest.raises(LookupError, match="_missing"):
        sa.forward_batch_keywords(src, "_missing")
    with pytest.raises(LookupError, match="no ForwardBatch"):
        sa.forward_batch_keywords("def _run_forward():\n    return 1\n")


# -- (b) against the installed sglang --------------------------------------------------------
@pytest.fixture(scope="module")
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.mark.sglang
@requires_sglang
def test_installed_version_is_the_modeled_one():
    assert sa.available() and sa.absent_reason() == ""
    assert sa.sglang_version() == sa.MODELED_VERSION


@pytest.mark.sglang
@requires_sglang
def test_conformance_report_is_empty(quiet):
    assert sa.conformance_report() == []


@pytest.mark.sglang
@requires_sglang
def test_predicate_agreement_table(quiet):
    rows = sa.predicate_table()
    grid = {(r["ep_size"], r["moe_a2a_backend"]) for r in rows}
    assert {(ep, b) for ep in (1, 2, 4, 8) for b in MOE_A2A_BACKENDS} <= grid
    bad = [r for r in rows if not r["agree"]]
    assert bad == [], bad
    # The override takes effect: both answers occur (EP 1 "none" is False, EP 2 True).
    assert {r["sglang"] for r in rows} == {True, False}
    keys = ("ep_size", "moe_a2a_backend", "world_dp_gather", "rocm", "attn_dp_size", "dp_mask_pad_rows")
    by_key = {tuple(r[k] for k in keys): r["sglang"] for r in rows}
    assert by_key[(1, "none", False, False, 1, True)] is False
    assert by_key[(2, "none", False, False, 1, True)] is True
    assert by_key[(1, "customized", False, False, 1, True)] is True
    assert by_key[(1, "none", True, False, 1, True)] is True  # elastic-EP world DP gather
    assert by_key[(1, "none", False, True, 2, True)] is True  # ROCm DP attention, via patched _is_hip
    assert by_key[(1, "none", False, True, 2, False)] is False  # ... unless SGLANG_DP_MASK_PAD_ROWS=false


@pytest.mark.sglang
@requires_sglang
def test_global_state_is_restored(quiet):
    import importlib

    fbi = importlib.import_module(sa.FORWARD_BATCH_INFO)
    rc = importlib.import_module(sa.RUNTIME_CONTEXT)
    flags = rc.get_flags()
    before = (flags.moe.a2a_backend, flags.dp.use_world_group_for_gather, fbi._is_hip)
    sa.enable_num_token_non_padded(
        ParallelSettings(ep_size=4, moe_a2a_backend="customized", world_dp_gather=True, rocm=True, attn_dp_size=2)
    )
    assert (flags.moe.a2a_backend, flags.dp.use_world_group_for_gather, fbi._is_hip) == before
    assert rc.get_parallel()._overrides == {}


@pytest.mark.sglang
@requires_sglang
def test_strategy_values_equal(quiet):
    assert sa.strategy_mismatches("cpu") == []
    ref = sa.make_num_token_non_padded(40, "cpu", ParallelSettings(ep_size=2))
    assert ref.dtype == torch.int32 and ref.shape == () and ref.item() == 40
    assert sa.make_num_token_non_padded(40, "cpu", ParallelSettings(ep_size=1)) is None


@pytest.mark.sglang
@requires_sglang
@requires_cuda
def test_strategy_values_equal_on_cuda(quiet):
    """On a GPU sglang stages through pinned memory; the values must still agree."""
    assert sa.strategy_mismatches("cuda") == []


@pytest.mark.sglang
@requires_sglang
def test_value_checker_catches_an_unconditional_on_demand(quiet, monkeypatch):
    broken = strategies.Strategy("on_demand", strategies.non_blocking, "broken", "test")
    monkeypatch.setitem(strategies._REGISTRY, "on_demand", broken)
    msgs = sa.strategy_mismatches("cpu")
    assert msgs and all("'on_demand'" in m and "sglang returns None" in m for m in msgs)


@pytest.mark.sglang
@requires_sglang
def test_predicate_checker_catches_the_pre_0_5_23_rule(quiet, monkeypatch):
    """The older `moe_ep_size > 1` rule disagrees where 0.5.23 added paths."""
    monkeypatch.setattr(sa, "lab_enable_num_token_non_padded", lambda p: p.ep_size > 1)
    msgs = [m for m in sa.conformance_report() if m.startswith("predicate drift")]
    assert any("'customized'" in m for m in msgs)
    assert any("'world_dp_gather': True" in m for m in msgs)


@pytest.mark.sglang
@requires_sglang
def test_record_fields_match_modulo_aliases():
    fields = sa.run_forward_fields()
    assert "forward_mode" in fields and "capture_hidden_mode" in fields
    c = sa.field_comparison(fields)
    assert c.conformant, c.drift_messages()
    assert dict(c.aliased) == sa.FIELD_ALIASES  # 0.5.23 renamed the pair to global_*


@pytest.mark.sglang
@requires_sglang
@pytest.mark.parametrize("dropped", ["seq_lens_cpu", "global_num_token_non_padded"])
def test_drift_is_named(quiet, dropped):
    fields = [f for f in sa.run_forward_fields() if f != dropped]
    msgs = sa.conformance_report(sglang_fields=fields)
    assert len(msgs) == 1, msgs
    assert dropped in msgs[0] and "field drift" in msgs[0]


@pytest.mark.sglang
@requires_sglang
def test_added_field_is_drift(quiet):
    msgs = sa.conformance_report(sglang_fields=list(sa.run_forward_fields()) + ["new_field"])
    assert msgs == [
        "field drift: sglang's _run_forward passes 'new_field' to ForwardBatch, which the lab's "
        "DraftForwardBatch lacks"
    ]


@pytest.mark.sglang
@requires_sglang
def test_source_is_the_installed_helper():
    src = sa.make_num_token_non_padded_source()
    assert src.lstrip().startswith("def _make_num_token_non_padded(")
    assert "enable_num_token_non_padded()" in src and "pin_memory" in src


@pytest.mark.sglang
@requires_sglang
def test_register_strategy(quiet):
    assert sa.STRATEGY_NAME not in strategies.names()  # not registered at import time
    with strategies.restored():
        s = sa.register_strategy()
        assert strategies.get("sglang") is s
        assert s.description == "sglang (installed version)" and sa.MODELED_VERSION in s.source
        assert s.fn(12, "cpu", ParallelSettings(ep_size=8)).item() == 12
        from dspark_lab.config import LabConfig

        assert LabConfig(strategy="sglang").strategy == "sglang"
    assert sa.STRATEGY_NAME not in strategies.names()
