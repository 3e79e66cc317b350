"""Every upstream PR and issue the kit cites, torch-free: what it says, what the kit quotes from it,
and whether that was checked against its stored text.

Keyed by (project, number): the project as texts name it ("SGLang", "vLLM", "PyTorch", ...), so that
`find(text)` can read a citation out of any sentence ("SGLang #34782", "PR #34759", "#26128 / #30365").
A bare "PR #N" or "#N" after no project name is SGLang's: the case's own project. A text that cites a
PR missing from CITATIONS fails a test (tests/test_citations.py); docs/citations.md is generated from
this table (`markdown()`), and a test keeps it current.

status: CHECKED (read in the PR's stored text; what we quote is there), NOT_RECHECKED (taken from a
note or a review, not read again here), NOT_FOUND (searched for and not found in the stored texts:
a text may cite it only to say so).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

CHECKED, NOT_RECHECKED, NOT_FOUND = "checked", "not re-checked", "not found"
STATUSES = (CHECKED, NOT_RECHECKED, NOT_FOUND)

# project as written in texts -> the GitHub repository ("" where the kit has not pinned it down)
PROJECTS = {
    "SGLang": "sgl-project/sglang", "vLLM": "vllm-project/vllm", "PyTorch": "pytorch/pytorch",
    "TensorRT-LLM": "NVIDIA/TensorRT-LLM", "tokenspeed": "lightseekorg/tokenspeed",
    "Advanced_Optimizers": "Koratahiu/Advanced_Optimizers", "minimind": "jingyaogong/minimind",
    "sparkinfer": "gittensor-ai-lab/sparkinfer", "vllm-ascend": "vllm-project/vllm-ascend", "1bit-MONSTER": "",
    "ninfer-3090": "ashalliants/ninfer-3090",
    "onnxruntime": "microsoft/onnxruntime", "TraceLens": "", "HTA": "facebookresearch/HolisticTraceAnalysis",
    "lupine": "", "HIP": "ROCm/HIP", "traceml": "", "rf-detr": "", "CuPy": "cupy/cupy", "tutorials": "pytorch/tutorials",
    "CUDA.jl": "JuliaGPU/CUDA.jl",
    "colibri": "", "vibesys": "", "rocm-systems": "ROCm/rocm-systems",
}
DEFAULT_PROJECT = "SGLang"
_ALIASES = {p.lower(): p for p in PROJECTS} | {"sglang's": "SGLang", "pytorch's": "PyTorch", "torch": "PyTorch"}


@dataclass(frozen=True)
class Citation:
    project: str
    number: int
    title: str  # what it is, a few words
    says: str  # what its text says, in our words
    we_quote: str  # what the kit quotes from it or rests on it
    status: str  # one of STATUSES
    state: str = ""  # merged / open / closed, where known

    def __post_init__(self) -> None:
        if self.project not in PROJECTS:
            raise ValueError(f"citation project must be one of {', '.join(PROJECTS)}; got {self.project!r}")
        if self.status not in STATUSES:
            raise ValueError(f"citation {self.key}: status must be one of {', '.join(STATUSES)}; got {self.status!r}")

    @property
    def key(self) -> tuple[str, int]:
        return self.project, self.number

    @property
    def name(self) -> str:
        return f"{self.project} #{self.number}"


def _c(project, number, title, says, we_quote, status=NOT_RECHECKED, state=""):
    return Citation(project, number, title, says, we_quote, status, state)


_ROWS = (
    # -- the case -----------------------------------------------------------------------------------
    _c("SGLang", 34782, "DSpark num_token_non_padded copy made non-blocking",
       "the scalar was built with torch.tensor(..., device=), whose pageable source makes PyTorch follow the "
       "cudaMemcpyAsync with a cudaStreamSynchronize every decode step; a profile showed 21 such syncs totalling "
       "71.4 ms (~3.5 ms per step, 42% of an 8.4 ms step) blocking the CPU from running ahead; fixed with "
       ".to(device, non_blocking=True)",
       "device_direct and non_blocking; 71.4 ms is host-blocked time as the PR states it, not a measured loss",
       CHECKED, "merged"),
    _c("SGLang", 34759, "Fix EP1 decode performance regression",
       "makes the scalar on demand (None unless enable_num_token_non_padded()); its text preserves 'the existing "
       "int32 device scalar'; reports a 6-9% "
       "per-step decode regression at EP 1 (2x RTX PRO 6000 Blackwell, TP2, 128 steps)",
       "on_demand; it removed the unused allocation and non-blocking copy",
       NOT_RECHECKED, "merged"),
    _c("SGLang", 33465, "the allocation made unconditional",
       "made num_token_non_padded's allocation and copy unconditional (the EP-1 regression #34759 fixed)",
       "the regression's origin", NOT_RECHECKED, "merged"),
    _c("SGLang", 34919, "DSpark CUDA-graph replay under MegaMoE with attention TP",
       "names the per-step num_token_non_padded scalar as an unexpected H2D copy plus stream sync",
       "that the scalar carried a stream sync every step", NOT_RECHECKED, "merged"),
    _c("SGLang", 38703, "pins num_token_non_padded and other metadata",
       "pins num_token_non_padded, extend_seq_lens, global_num_tokens; calls pageable non_blocking "
       "'effectively host-synchronous'", "on_demand_pinned's pinned source; the card reads its claim",
       NOT_RECHECKED, "open"),
    _c("SGLang", 35944, "pins scheduler and DSpark metadata before non_blocking H2D",
       "pins scheduler and DSpark draft/prefill metadata before non_blocking H2D copies", "the field around the case",
       NOT_RECHECKED, "merged"),
    _c("SGLang", 25852, "pad-token mask on by default",
       "enable_num_token_non_padded() true when EP > 1 or decode CUDA graphs are on",
       "the predicate at EP 1 would change: 'at EP 1 nothing reads it' holds with the default backends only",
       NOT_RECHECKED, "open"),
    _c("SGLang", 33985, "the #34759 test bed", "2x RTX PRO 6000 Blackwell, TP2, PCIe without NVLink, driver 610 / CUDA 13.3",
       "the platform of the 6-9% figure", NOT_RECHECKED),
    _c("SGLang", 35106, "an 8-byte copy blocking the host", "an 8-byte copy blocked the host for a whole target prefill",
       "a neighbouring sync on the same path", NOT_RECHECKED),
    # -- the card's wait/launch anchors (results/facts/launch_anchors.py) -----------------------------
    _c("CUDA.jl", 2162, "profiler improvements: per-call time distributions, CUDA.@bprofile",
       "its description's example, CUDA.@bprofile time=0.01 CuArray([1]).+1 (525 calls each), mean per call: "
       "cuLaunchKernel 3.48 us, cuMemcpyHtoDAsync 3.05 us, cuStreamSynchronize 301.09 ns (and cuCtxSynchronize "
       "3.07 us); the GPU is not named",
       "published small-call figures set beside the card's stream sync, kernel launch and 4-byte copy",
       CHECKED, "merged"),
    _c("SGLang", 29960, "cudaGraphLaunch host time of a speculative verify graph",
       "a comment measured 2.826 ms of target-verification cudaGraphLaunch host time for a 2,876-node graph (TP0 "
       "median of 12 cycles), DeepSeek-V4-Flash on 2x RTX PRO 6000 Blackwell (SM120, TP2, PCIe); the issue itself "
       "is about GLM-5.1's MTP target verify", "a published graph launch set beside the card's graph launches by "
       "node count", CHECKED, "open"),
    _c("vLLM", 47081, "spin-wait events busy-polling",
       "spin-waiting events busy-polled the driver and made a TP rank a straggler; fixed with blocking events",
       "why the card times a spinning and a blocking event's wait with the CPU time each burns"),
    _c("vLLM", 49780, "per-step pin_memory() on the host allocator",
       "a pin_memory() every step serialised on the caching host allocator",
       "why the card times pin_memory() of a fresh tensor and the host allocator's hit"),
    _c("vLLM", 37006, "per-step pin_memory() on the host allocator (the earlier report)",
       "a pin_memory() every step serialised on the caching host allocator", "as vLLM #49780"),
    _c("SGLang", 29075, "the decode read-back moved onto a copy stream",
       "moved the decode D2H onto a copy stream; on ROCm the added cross-stream wait regressed decode (10-20% as "
       "its fix, #29642, states)",
       "why the card times a cross-stream wait and advice charges it; docs/field.md: moving a wait can regress "
       "another platform, not reduced to a one-GPU step"),
    _c("SGLang", 29642, "the HIP fix for the copy stream's cross-stream wait",
       "the ROCm fix for the decode regression that the copy stream's cross-stream wait caused (#29075)",
       "beside SGLang #29075"),
    # -- the gallery --------------------------------------------------------------------------------
    _c("SGLang", 20266, "EAGLE-3 verify: the seq_lens sum read from the host mirror",
       "replaces a device sum read back with .item() by the host-side mirror",
       "scalar_item's shape and fix; its '1.38-1.50x' could not be found in the stored text and is not quoted",
       NOT_RECHECKED, "merged"),
    _c("SGLang", 26462, "the same cleanup on the draft side", "the draft-side counterpart of #20266",
       "mentioned beside #20266; it was closed, not merged", NOT_RECHECKED, "closed"),
    _c("SGLang", 6474, "padded-row masking (as cited before)", "not found in the stored PR texts",
       "nothing: tensor_bool cites the generic shape instead", NOT_FOUND),
    _c("SGLang", 29415, "torch.tensor([...], device=) fixed with torch.full (as cited before)",
       "not found in the stored PR texts", "nothing: list_to_device cites #32575 instead", NOT_FOUND),
    _c("SGLang", 32575, "alloc_for_extend: torch.tensor([-1], device=) replaced by torch.full",
       "per batch 12 -> 0 cudaStreamSynchronize, GPU idle 33.1 -> 8.2 ms, prefill window 1678 -> 1643 ms",
       "list_to_device's shape and fix", NOT_RECHECKED, "merged"),
    _c("SGLang", 27689, "FlashInfer MLA plan() in verify and draft-extend",
       "the planner's index arrays copied to the host per plan", "host_plan's shape and fix", NOT_RECHECKED),
    _c("SGLang", 26128, "overlap scheduler: a per-step seq_lens_cpu copy",
       "removed a pinned device-to-host copy plus a stream sync (a sync the counters see)",
       "pageable_copy's neighbourhood only: not a pageable copy that looks non-blocking", NOT_RECHECKED),
    _c("SGLang", 30365, "overlap scheduler: a per-step seq_lens_cpu copy (follow-up)",
       "removed a pinned device-to-host copy plus a stream sync", "as #26128", NOT_RECHECKED),
    _c("SGLang", 31364, "overlap scheduler: a per-step seq_lens_cpu copy (follow-up)",
       "removed a pinned device-to-host copy plus a stream sync", "as #26128", NOT_RECHECKED),
    _c("vLLM", 52657, "the prefill planner's host metadata", "the planner's metadata kept on the host",
       "host_plan's second source", NOT_RECHECKED),
    _c("vLLM", 24105, "DP token counts: a gloo CPU all-reduce replaced by NCCL plus a read-back",
       "the host/device trade for the DP token counts", "host_split_sizes' mirror-image trade", NOT_RECHECKED),
    _c("vLLM", 51599, "condense() writes a pinned buffer while its non-blocking D2H copy is in flight",
       "the copy moved to a runner-owned buffer (as vLLM #53613's description states it)",
       "the race check's pinned_written_in_flight form and the condense race case", NOT_RECHECKED),
    _c("vLLM", 53613, "spec-decode input prep ordered after the previous step's postprocess",
       "names vLLM #51599's shape: condense() writes the pinned accepted-count tensor while the D2H is in flight; "
       "quotes vLLM #42574's nsys numbers (host time in cudaEventSynchronize 0.041 -> 4.106 s)",
       "where the race check's condense shape is described, and deferred_event_sync's numbers are quoted", CHECKED,
       "open"),
    # -- field cases (the field gallery) ------------------------------------------------------------
    _c("TensorRT-LLM", 16680, "select_blocks_from_maxscore: a blocking H2D every step",
       "n_valid_blocks.to(device=, dtype=torch.long) was a blocking host-to-device copy every step; made on the "
       "device once per step: request latency P50 298.2 -> 269.6 ms", "a field case", CHECKED),
    _c("tokenspeed", 45, "_init_extend_metadata: seq_lens.max().item()",
       "replaced by the pinned CPU mirror that already existed: mean TTFT 107.3 -> 97.4 ms, the ~10 ms the host "
       "waited behind the queued forward", "a field case", CHECKED),
    _c("Advanced_Optimizers", 5, "a tensor as the Python-number alpha= of g.sub",
       "g.sub(w, alpha=proj) with a tensor proj calls .item() silently; g.sub(w * proj) made the optimizer step "
       "'about 50% faster'", "a field case", NOT_RECHECKED),
    _c("SGLang", 28491, "prepare_for_decode: latest_output_ids with torch.tensor(..., device=)",
       "a blocking torch.tensor(..., device=) and a stream sync every decode step, most visible at small batch",
       "a field case: #34782's pattern elsewhere in the same engine", CHECKED),
    _c("SGLang", 28500, "prepare_for_decode on the speculative-decoding path",
       "the same blocking latest_output_ids construction on the spec-decode path", "beside #28491", CHECKED),
    _c("minimind", 837, "per-expert mask.any() + nonzero() + boolean indexing",
       "96 -> 8 syncs per forward: 1.2-1.5x faster at >= 4 experts, no gain at 2",
       "a field case where removing syncs buys little: a sync count is not a cost", CHECKED),
    _c("sparkinfer", 725, "a post-verify stream sync removed",
       "+0.28% on a decode loop about 94% GPU-busy", "a field case where removing a sync buys nearly nothing",
       NOT_RECHECKED),
    _c("vllm-ascend", 16428, "DSpark on Ascend: reused host staging arrays",
       "reused host staging arrays already held the next batch: one prefill step had 6,640 wrong token IDs, 454 "
       "wrong request indices, 6,669 wrong query offsets, then NaNs", "the reused pinned buffer's hazard in production",
       NOT_RECHECKED),
    _c("1bit-MONSTER", 2344, "a pinned source overwritten in flight",
       "corruption ~100% at once, 99.97% at 1 us, 0.45% at 5 us, 0.03% at 100 us of refill delay",
       "a race with a window of microseconds is flaky by nature", NOT_RECHECKED),
    _c("ninfer-3090", 44, "a pageable copy returns once staged",
       "on a non-blocking stream 146 of 200 copies raced on an idle RTX 3090, none at or below ~256 KiB",
       "a field hazard", NOT_RECHECKED),
    _c("onnxruntime", 32121, "a staging buffer captured in a CUDA graph",
       "the graph records the staging buffer's host address; another inference reuses the block and the replay "
       "copies the wrong bytes", "a field hazard", NOT_RECHECKED),
    _c("PyTorch", 130785, "a pinned block returned before its copy ends",
       "A = rand(pin_memory=True); B = A.cuda(non_blocking=True); return B returns the pinned block to the "
       "allocator before the copy ends ('at least 94 instances' in open source)", "a field hazard", NOT_RECHECKED),
    # -- the static finder and run-ahead -------------------------------------------------------------
    _c("vLLM", 56202, "a static linter for non_blocking copies from unpinned sources",
       "an AST pre-commit check; '# gpu-sync-ok: <reason>' exempts a line", "the static finder's model", NOT_RECHECKED, "open"),
    _c("vLLM", 56203, "the linter follows tensors through local names",
       "found two real sites the inline pass missed", "the static finder's model", NOT_RECHECKED),
    _c("tokenspeed", 1664, "allow_host_sync(reason)", "a scoped allowance for a by-design host sync",
       "the guard's allow-list", NOT_RECHECKED),
    _c("SGLang", 31468, "DFlash run-ahead", "launch lead -50 us -> +19 ms, run-ahead fraction 0.88 -> 0.995, "
       "+12-13% tokens/s per user at low concurrency", "why run-ahead matters", NOT_RECHECKED),
    _c("SGLang", 32219, "the host off the critical path",
       "the host stays off the critical path iff the host loop is shorter than the GPU step", "why run-ahead matters",
       NOT_RECHECKED),
    _c("TraceLens", 620, "GPU gaps classified sync_drain / no_sync", "every GPU gap classified, with what the CPU did",
       "the idle breakdown's neighbour", NOT_RECHECKED, "open"),
    # -- the field, third round (gallery/spec_cases.py, gallery/counter_cases.py, lint, compile, capture) --
    _c("SGLang", 26171, "EAGLE-3 on Blackwell: torch.sum(batch.seq_lens).item() on the draft side",
       "proposes int(batch.seq_lens_cpu.sum()) for torch.sum(batch.seq_lens).item(); reports 1.00 -> 1.38x on humaneval",
       "draft_sum_item's shape and fix; an issue, closed as inactive", NOT_RECHECKED, "closed"),
    _c("SGLang", 28480, "every seq_lens_cpu.max().item() replaced by the static bound max_context_len",
       "B300, TP4: 458 -> 521 tok/s, syncs per verify cycle 4 -> 3", "max_len_static_bound's shape and fix",
       NOT_RECHECKED, "closed"),
    _c("SGLang", 28106, "metadata sized from a static upper bound, a device-side kernel filling the entries",
       "sizes the metadata from a static upper bound and fills the entries with a device-side kernel",
       "size_from_device_max's fix", NOT_RECHECKED, "merged"),
    _c("SGLang", 27177, "an earlier attempt that fell back to a GPU .max()",
       "sized the metadata by a GPU .max(): a sync in disguise", "size_from_device_max's case", NOT_RECHECKED, "closed"),
    _c("vLLM", 38047, "GDNAttentionMetadata.build: CPU boolean masks during speculative decoding",
       "switches to CPU boolean masks (async since PyTorch #156384) and fixes repeat_interleave's output_size; the "
       "syncs gone in a torch profile, 7% more throughput and 20% lower TTFT in a quick benchmark",
       "host_bool_mask's shape and fix; lint's host-mask rule", CHECKED, "merged"),
    _c("PyTorch", 156384, "no cudaStreamSynchronize when a GPU tensor is indexed with a CPU boolean mask",
       "the mask's nonzero() indices copied to the GPU without a sync when the mask is on the CPU (the stored "
       "text describes index_put, target[mask] = src)",
       "lint does not flag x[mask] of a host mask; the gallery's host_bool_mask measures it on the recorded torch",
       CHECKED, "closed"),
    _c("vLLM", 32951, "the CPU assumes every draft accepted, the GPU corrects", "TPOT 9.19 -> 8.90 ms",
       "assume_accepted's shape and fix", NOT_RECHECKED),
    _c("vLLM", 20078, "EAGLE input preparation moved to the GPU",
       "~4-5% for two optimisations together, ~2.5% from the fused kernels alone",
       "draft_inputs_prep's shape and fix", NOT_RECHECKED, "closed"),
    _c("vLLM", 42574, "an event.synchronize() deferred",
       "host time in cudaEventSynchronize 0.041 -> 4.106 s in its own nsys numbers, as quoted in vLLM #53613",
       "deferred_event_sync: a deferred wait is not a removed one", NOT_RECHECKED),
    _c("colibri", 431, "a sum of API time is not a cost", "a profile's summed sync-call time is not what the syncs cost",
       "api_time_sum's lesson", NOT_RECHECKED),
    _c("vLLM", 36013, "a race fix", "mean TTFT 67.7 -> 76.3 ms", "race_fix_price: a race fix has a price",
       NOT_RECHECKED),
    _c("vibesys", 421, "run-ahead against first-token latency", "p95 TTFT -24% with overlap off",
       "docs/field.md: run-ahead can cost first-token latency; not reduced to a one-GPU step", NOT_RECHECKED),
    _c("PyTorch", 182190, "non-blocking DtH/HtD not ordered properly under compile",
       "a non-blocking D2H copy followed by .item() was not ordered under torch.compile (Inductor emitted no wait)",
       "verify's compiled check runs the shape and records the torch it checked", CHECKED, "closed"),
    _c("PyTorch", 185252, "Inductor synchronizes non-blocking D2H copies",
       "fixes PyTorch #182190: an event recorded after a pinned non-blocking D2H copy and synchronized", "as PyTorch #182190",
       CHECKED, "closed"),
    _c("rocm-systems", 4508, "capture_error_mode", "a sync during capture fails it in the global mode, from any "
       "thread; thread-local and relaxed modes narrow it", "the guard's capture witness", NOT_RECHECKED),
)

CITATIONS: dict[tuple[str, int], Citation] = {}
for _r in _ROWS:
    if _r.key in CITATIONS:
        raise ValueError(f"citation {_r.name} is listed twice")
    CITATIONS[_r.key] = _r


def get(project: str, number: int) -> Citation:
    try:
        return CITATIONS[(project, int(number))]
    except KeyError:
        raise ValueError(f"{project} #{number} is not in the citation table (results/facts/citations.py)") from None


def cite(project: str, number: int) -> str:
    """'SGLang #34782', for a text, after checking the table holds it."""
    return get(project, number).name


# "<project> [PR|PRs|issue] #N", then "/ #M", ", #M", "and #M" continuing the same project
_PROJECT = "|".join(re.escape(a) for a in sorted(_ALIASES, key=len, reverse=True))
_HEAD = re.compile(rf"(?<![\w-])(?:(?P<project>{_PROJECT})\s+)?(?:(?:PRs?|pull request|issue)\s+)?#(?P<n>\d{{1,7}})(?![\w])",
                   re.IGNORECASE)
NEAR = 80  # characters: how far a bare "#N" may follow the project named before it
_NEXT = re.compile(r"\s*(?:/|,|and|or|in|of|to)\s*#(?P<n>\d{2,7})(?![\w])")


def find(text: str) -> list[tuple[str, int]]:
    """The (project, number) citations in `text`, in order. A number after a project name is that
    project's; one continuing a list ("#1 / #2", "and #3") or after "PR"/"in"/"of" takes the project
    named last, when that was on the same line and at most NEAR characters before; else SGLang's.
    Colours ('#17becf', 'color:#555') are not citations."""
    out, last, last_end, pos = [], DEFAULT_PROJECT, -NEAR, 0
    for m in _HEAD.finditer(text):
        start = m.start("n") - 1
        if not m.group("project") and ((start > 0 and text[start - 1] in ":'\"=") or len(m.group("n")) < 2):
            continue  # a CSS or a string colour, or a one-digit "#1" that names no project
        if m.group("project"):
            last = _ALIASES[m.group("project").lower()]
        elif m.start() - last_end > NEAR or "\n" in text[max(last_end, 0):m.start()]:
            last = DEFAULT_PROJECT  # far from the last project named: the case's own project
        out.append((last, int(m.group("n"))))
        last_end = m.end()
        pos = m.end()
        while (nxt := _NEXT.match(text, pos)) is not None:
            out.append((last, int(nxt.group("n"))))
            pos = last_end = nxt.end()
    return list(dict.fromkeys(out))


def missing(text: str) -> list[str]:
    """The citations in `text` that the table does not hold, as 'Project #N'."""
    return [f"{p} #{n}" for p, n in find(text) if (p, n) not in CITATIONS]


def markdown() -> str:
    """docs/citations.md: the table in words, one row per citation (generated: edit the table, not the file)."""
    head = ["# Citations", "",
            "Every upstream PR and issue the kit cites: what it says, what the kit quotes from it, and whether",
            "that was checked against the PR's stored text. Generated from `dspark_lab/results/facts/citations.py`",
            "(`python -m dspark_lab.results.facts.citations > docs/citations.md`); a test keeps it current.", "",
            f"Status: **{CHECKED}** (read in the stored text), **{NOT_RECHECKED}** (from a note or a review, not",
            f"read again), **{NOT_FOUND}** (searched for, not found: cited only to say so).", "",
            "| PR | state | what it is | what it says | what the kit quotes | status |", "|---|---|---|---|---|---|"]
    cell = lambda s: s.replace("|", "\\|")
    rows = [f"| {c.name} | {c.state or '?'} | {cell(c.title)} | {cell(c.says)} | {cell(c.we_quote)} | {c.status} |"
            for c in sorted(CITATIONS.values(), key=lambda c: (c.project.lower(), c.number))]
    return "\n".join(head + rows) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
