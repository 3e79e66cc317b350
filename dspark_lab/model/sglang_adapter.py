"""Optional adapter to an installed SGLang: run its own code beside the lab's re-implementation.

Active only where `sglang` imports (it pins torch==2.14.1 and ~80 packages, so it lives in an
environment of its own: `pip install -e .[sglang]`, or `bash scripts/sglang_env.sh`). Everywhere
else `available()` is False, `absent_reason()` says why, and every function that needs SGLang
raises RuntimeError with that sentence.

What it calls, in sglang 0.5.23 (nothing of SGLang is copied here):
- `enable_num_token_non_padded()` (`sglang/srt/model_executor/forward_batch_info.py`), which
  reads process-global state: `get_parallel().moe_ep_size` and `.attn_dp_size`, the MoE
  all-to-all backend in `get_flags().moe.a2a_backend`, the elastic-EP flags in `get_flags().dp`
  (read by `world_dp_gather_enabled()`), and, through the lru-cached `_dp_tp_moe_masks_pad_rows()`,
  the module constant `_is_hip` and the env var SGLANG_DP_MASK_PAD_ROWS.
  `_sglang_settings(parallel)` sets exactly those for one call through SGLang's own switches
  (`get_parallel().override(...)`, its scoped override; the flag objects; `mock.patch` of
  `_is_hip` and of the env var) and clears that lru cache on entry and exit, restoring all of it.
- `_make_num_token_non_padded(num_tokens, device)`
  (`sglang/srt/speculative/dspark_components/dspark_draft.py`, PR #34759 and later): None unless
  the predicate holds, else an int32 scalar from a host tensor pinned where
  `is_pin_memory_available(device)` (False for device "cpu" on every platform), copied with
  `non_blocking=True`.
- `DraftBlockProposer._run_forward` in the same file: its `ForwardBatch(...)` keywords are read
  from the installed source with `ast` (`run_forward_fields()`), never hard-coded.

`import sglang` and those modules work on a CPU-only machine with no env tweaks (0.5.23 only
warns: AWQ/GGUF unsupported, Triton falls back to CPU; the import takes ~10 s). Where an import
fails, `absent_reason()` names the module and the error.
"""
from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional
from unittest import mock

import torch

from dspark_lab import strategies
from dspark_lab.model.draft import DraftForwardBatch
from dspark_lab.predicate import MOE_A2A_BACKENDS, ParallelSettings
from dspark_lab.predicate import enable_num_token_non_padded as lab_enable_num_token_non_padded
from dspark_lab.results.facts import strategy_table

MODELED_VERSION = "0.5.23"
INSTALL_HINT = "pip install -e .[sglang]"

FORWARD_BATCH_INFO = "sglang.srt.model_executor.forward_batch_info"
DSPARK_DRAFT = "sglang.srt.speculative.dspark_components.dspark_draft"
RUNTIME_CONTEXT = "sglang.srt.runtime_context"
MOE_UTILS = "sglang.srt.layers.moe.utils"
_NEEDED_MODULES = (RUNTIME_CONTEXT, MOE_UTILS, FORWARD_BATCH_INFO, DSPARK_DRAFT)
DSPARK_DRAFT_FILE = "srt/speculative/dspark_components/dspark_draft.py"  # under the sglang package

# The lab's DraftForwardBatch field -> SGLang's ForwardBatch keyword, where the names differ.
# 0.5.23 renamed the pair (the PRs the lab studies call them num_token_non_padded[_cpu]); it
# keeps a LOCAL `num_token_non_padded` derived from the GLOBAL one for sharded MoE input.
FIELD_ALIASES: dict[str, str] = {
    "num_token_non_padded": "global_num_token_non_padded",
    "num_token_non_padded_cpu": "global_num_token_non_padded_cpu",
}

# Lab strategies that re-implement SGLang's helper (None exactly when SGLang returns None), by their
# rows' mirrors_sglang; the others always return a tensor by design.
MIRRORS_SGLANG = tuple(r.name for r in strategy_table.BUILTIN_ROWS if r.mirrors_sglang)

CONFORMANCE_EP_SIZES = (1, 2, 4, 8)
CONFORMANCE_NUM_TOKENS = (1, 5, 40, 1280)
STRATEGY_NAME = "sglang"


# -- availability ----------------------------------------------------------------------------
def _import_error() -> Optional[str]:
    """None when every module the adapter uses imports; else a sentence saying why not."""
    try:
        import sglang  # noqa: F401  (first: a None in sys.modules['sglang'] stops here)
    except ImportError as e:
        if isinstance(e, ModuleNotFoundError) and e.name not in (None, "sglang"):
            return (
                f"sglang is installed but `import sglang` failed: {type(e).__name__}: {e}. "
                f"Reinstall it with `{INSTALL_HINT}` in an environment of its own."
            )
        return (
            f"sglang is not installed in this environment ({sys.executable}); install it with "
            f"`{INSTALL_HINT}` in an environment of its own (it pins torch==2.14.1), "
            "or run `bash scripts/sglang_env.sh`, which builds one and runs the sglang tests."
        )
    except Exception as e:  # an installed sglang whose import breaks
        return f"sglang is installed but `import sglang` failed: {type(e).__name__}: {e}"
    for name in _NEEDED_MODULES:
        try:
            importlib.import_module(name)
        except Exception as e:
            return f"sglang is installed but importing {name} failed: {type(e).__name__}: {e}"
    return None


def available() -> bool:
    """True when sglang and the modules this adapter calls import in this environment."""
    return _import_error() is None


def absent_reason() -> str:
    """Why the adapter is unavailable, as one clear sentence ('' when it is available)."""
    return _import_error() or ""


def _require() -> None:
    reason = _import_error()
    if reason is not None:
        raise RuntimeError(reason)


def _module(name: str):
    _require()
    return importlib.import_module(name)


def sglang_version() -> str:
    """The installed sglang's version string."""
    _require()
    import sglang

    return str(sglang.__version__)


# -- SGLang's own predicate and helper under explicit parallel settings ----------------------
@contextlib.contextmanager
def _sglang_settings(parallel: ParallelSettings):
    """Set the process-global state SGLang's predicate reads to `parallel`, for one `with`.

    Restores every value on exit (SGLang's scoped `override` restores the parallel widths).
    """
    fbi = _module(FORWARD_BATCH_INFO)
    rc = _module(RUNTIME_CONTEXT)
    moe_utils = _module(MOE_UTILS)
    flags = rc.get_flags()
    saved = (flags.moe.a2a_backend, flags.dp.use_world_group_for_gather, flags.dp.joiner_skip_all_gather)
    env = {"SGLANG_DP_MASK_PAD_ROWS": "true" if parallel.dp_mask_pad_rows else "false"}
    fbi._dp_tp_moe_masks_pad_rows.cache_clear()
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(
                rc.get_parallel().override(moe_ep_size=parallel.ep_size, attn_dp_size=parallel.attn_dp_size)
            )
            stack.enter_context(mock.patch.object(fbi, "_is_hip", parallel.rocm))
            stack.enter_context(mock.patch.dict(os.environ, env))
            flags.moe.a2a_backend = moe_utils.MoeA2ABackend(parallel.moe_a2a_backend)
            # world_dp_gather_enabled() = use_world_group_for_gather and not joiner_skip_all_gather
            flags.dp.use_world_group_for_gather = parallel.world_dp_gather
            flags.dp.joiner_skip_all_gather = False
            yield fbi
    finally:
        flags.moe.a2a_backend, flags.dp.use_world_group_for_gather, flags.dp.joiner_skip_all_gather = saved
        fbi._dp_tp_moe_masks_pad_rows.cache_clear()


def enable_num_token_non_padded(parallel: ParallelSettings) -> bool:
    """SGLang's own `enable_num_token_non_padded()`, evaluated under `parallel`."""
    with _sglang_settings(parallel) as fbi:
        return bool(fbi.enable_num_token_non_padded())


def make_num_token_non_padded(num_tokens: int, device, parallel: ParallelSettings, *, buffer=None):
    """SGLang's own `_make_num_token_non_padded(num_tokens, device)` under `parallel`.

    `buffer` is accepted for the strategy signature and ignored (SGLang allocates each call).
    """
    draft = _module(DSPARK_DRAFT)
    with _sglang_settings(parallel):
        return draft._make_num_token_non_padded(num_tokens, device)


def register_strategy() -> strategies.Strategy:
    """Register SGLang's helper as the strategy "sglang" (not done at import time)."""
    row = strategy_table.StrategyRow(STRATEGY_NAME, "sglang (installed version)", f"installed sglang {sglang_version()}")
    return strategies.register(make_num_token_non_padded, row)


# -- source ----------------------------------------------------------------------------------
def make_num_token_non_padded_source() -> str:
    """The installed `_make_num_token_non_padded`'s source (for notebook 01)."""
    return inspect.getsource(_module(DSPARK_DRAFT)._make_num_token_non_padded)


def _dspark_draft_path() -> Path:
    _require()
    import sglang

    return Path(sglang.__file__).parent / DSPARK_DRAFT_FILE


def forward_batch_keywords(source: str, function: str = "_run_forward") -> tuple[str, ...]:
    """The keyword names passed to `ForwardBatch(...)` inside `function` of a module's source.

    Calls written `ForwardBatch(...)` or `<anything>.ForwardBatch(...)` count; a `**kwargs`
    spread has no name and is skipped. Keywords of several calls are merged in order.
    """
    tree = ast.parse(textwrap.dedent(source))
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == function]
    if not funcs:
        raise LookupError(f"no function named {function!r} in the source")
    names: list[str] = []
    for fn in funcs:
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            callee = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if callee != "ForwardBatch":
                continue
            names += [k.arg for k in node.keywords if k.arg is not None and k.arg not in names]
    if not names:
        raise LookupError(f"{function!r} makes no ForwardBatch(...) call with keywords")
    return tuple(names)


def run_forward_fields() -> tuple[str, ...]:
    """The keywords the installed `DraftBlockProposer._run_forward` passes to `ForwardBatch`.

    Parsed from the installed file with `ast` (the file is read, not imported).
    """
    return forward_batch_keywords(_dspark_draft_path().read_text())


# -- conformance -----------------------------------------------------------------------------
@dataclass(frozen=True)
class FieldComparison:
    """The lab record's fields against SGLang's ForwardBatch keywords."""

    matched: tuple[str, ...]  # same name on both sides
    aliased: tuple[tuple[str, str], ...]  # (lab name, sglang name): a known rename (FIELD_ALIASES)
    missing_in_sglang: tuple[str, ...]  # lab fields SGLang does not pass: drift
    extra_in_sglang: tuple[str, ...]  # SGLang keywords the lab record lacks: drift

    @property
    def conformant(self) -> bool:
        return not (self.missing_in_sglang or self.extra_in_sglang)

    def drift_messages(self) -> list[str]:
        msgs = []
        for f in self.missing_in_sglang:
            alias = f" (nor under its known alias {FIELD_ALIASES[f]!r})" if f in FIELD_ALIASES else ""
            msgs.append(
                f"field drift: the lab's DraftForwardBatch has {f!r}, which sglang's "
                f"_run_forward does not pass to ForwardBatch{alias}"
            )
        for s in self.extra_in_sglang:
            msgs.append(
                f"field drift: sglang's _run_forward passes {s!r} to ForwardBatch, "
                "which the lab's DraftForwardBatch lacks"
            )
        return msgs

    def alias_notes(self) -> list[str]:
        return [f"known alias: lab {a!r} is sglang {b!r}" for a, b in self.aliased]


def compare_fields(
    lab_fields: Iterable[str], sglang_fields: Iterable[str], aliases: Optional[dict[str, str]] = None
) -> FieldComparison:
    """Pure comparison (no SGLang needed). A lab field matches its own name or its alias."""
    aliases = FIELD_ALIASES if aliases is None else aliases
    lab, sgl = list(lab_fields), list(sglang_fields)
    used: set[str] = set()
    matched, aliased, missing = [], [], []
    for f in lab:
        if f in sgl:
            matched.append(f)
            used.add(f)
        elif f in aliases and aliases[f] in sgl:
            aliased.append((f, aliases[f]))
            used.add(aliases[f])
        else:
            missing.append(f)
    extra = [s for s in sgl if s not in used]
    return FieldComparison(tuple(matched), tuple(aliased), tuple(missing), tuple(extra))


def field_comparison(sglang_fields: Optional[Iterable[str]] = None) -> FieldComparison:
    """DraftForwardBatch.field_names() against `sglang_fields` (default: the installed ones)."""
    return compare_fields(
        DraftForwardBatch.field_names(), run_forward_fields() if sglang_fields is None else sglang_fields
    )


def predicate_cases() -> list[ParallelSettings]:
    """EP sizes {1,2,4,8} x the a2a backends the lab models, then the other inputs one by one."""
    cases = [ParallelSettings(ep_size=ep, moe_a2a_backend=b) for ep in CONFORMANCE_EP_SIZES for b in MOE_A2A_BACKENDS]
    cases.append(ParallelSettings(world_dp_gather=True))
    for backend in ("none", "deepep"):  # ROCm DP-attention + TP-MoE pad-row masking needs "none"
        for attn_dp in (1, 2):
            for mask in (True, False):
                cases.append(
                    ParallelSettings(moe_a2a_backend=backend, rocm=True, attn_dp_size=attn_dp, dp_mask_pad_rows=mask)
                )
    cases.append(ParallelSettings(attn_dp_size=2))  # the same on CUDA: no masking
    return cases


def predicate_table(cases: Optional[Iterable[ParallelSettings]] = None) -> list[dict]:
    """One row per case: the settings, the lab's answer, SGLang's, and whether they agree."""
    rows = []
    for p in predicate_cases() if cases is None else cases:
        lab, sgl = lab_enable_num_token_non_padded(p), enable_num_token_non_padded(p)
        rows.append(
            {
                "ep_size": p.ep_size,
                "moe_a2a_backend": p.moe_a2a_backend,
                "world_dp_gather": p.world_dp_gather,
                "attn_dp_size": p.attn_dp_size,
                "rocm": p.rocm,
                "dp_mask_pad_rows": p.dp_mask_pad_rows,
                "lab": lab,
                "sglang": sgl,
                "agree": lab == sgl,
            }
        )
    return rows


def _describe_value(t) -> str:
    if t is None:
        return "None"
    if not isinstance(t, torch.Tensor):
        return f"{type(t).__name__} {t!r}"
    return f"tensor({t.item()}, dtype={t.dtype}, shape={tuple(t.shape)}, device={t.device.type})"


def strategy_mismatches(device="cpu", cases: Optional[Iterable[ParallelSettings]] = None) -> list[str]:
    """The lab's built-in strategies against SGLang's helper for the same inputs.

    Where SGLang returns a tensor, every strategy must give the same value, dtype int32, shape ()
    and device type. Where SGLang returns None, the strategies that mirror it (MIRRORS_SGLANG)
    must return None too; the unconditional ones return a tensor by design.
    """
    device = torch.device(device)
    if cases is None:
        cases = [ParallelSettings(ep_size=ep, moe_a2a_backend=b) for ep in (1, 2) for b in ("none", "customized")]
    msgs = []
    for p in cases:
        for n in CONFORMANCE_NUM_TOKENS:
            ref = make_num_token_non_padded(n, device, p)
            for row in strategy_table.BUILTIN_ROWS:
                name = row.name
                buffer = torch.zeros((), dtype=torch.int32, device=device) if row.needs_persistent_buffer else None
                got = strategies.get(name).fn(n, device, p, buffer=buffer)
                where = f"strategy {name!r} at num_tokens={n}, {p}"
                if ref is None:
                    if row.mirrors_sglang and got is not None:
                        msgs.append(f"value drift: {where}: sglang returns None, the lab {_describe_value(got)}")
                    continue
                ok = (
                    isinstance(got, torch.Tensor)
                    and got.dtype == ref.dtype
                    and tuple(got.shape) == tuple(ref.shape)
                    and got.device.type == ref.device.type
                    and got.item() == ref.item()
                )
                if not ok:
                    msgs.append(
                        f"value drift: {where}: sglang returns {_describe_value(ref)}, "
                        f"the lab {_describe_value(got)}"
                    )
    return msgs


def conformance_report(sglang_fields: Optional[Iterable[str]] = None, device="cpu") -> list[str]:
    """Human-readable drift between the lab and the installed SGLang; empty when conformant.

    Covers: the record's fields (with FIELD_ALIASES), the predicate over predicate_cases(), and
    the strategies' values against SGLang's helper on `device`. `sglang_fields` replaces the
    parsed keyword list (to test the checker itself).
    """
    msgs = []
    version = sglang_version()
    if version != MODELED_VERSION:
        msgs.append(f"version: installed sglang {version}, the lab models {MODELED_VERSION}")
    msgs += field_comparison(sglang_fields).drift_messages()
    for r in predicate_table():
        if not r["agree"]:
            settings = {k: v for k, v in r.items() if k not in ("lab", "sglang", "agree")}
            msgs.append(f"predicate drift at {settings}: the lab says {r['lab']}, sglang says {r['sglang']}")
    msgs += strategy_mismatches(device)
    return msgs
