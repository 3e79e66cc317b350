"""Published figures for what waiting and launching cost, typed as their sources state them, to set
beside a card's measured wait/launch cells (results.analyses.card_primitives.anchors_beside) and
never mixed into them. Each anchor names its citation (results/facts/citations.py), the quantity,
its value where the source gives one (None where it reports a behaviour, not a number), the setting it
was measured in, and the card cells it is set beside: (primitive or copy source, parameter, queue).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dspark_lab.results.facts.citations import get


@dataclass(frozen=True)
class Anchor:
    project: str
    number: int
    quantity: str
    value: Optional[float]
    unit: str  # "us", "ms" or "" with value None
    setting: str
    beside: tuple  # ((cell name, parameter, queue), ...): primitive names, or "copy:<source>" for a copy cell
    per: int = 1  # the value covers this many units (a graph's nodes): value / per is the anchor's per-unit figure

    def __post_init__(self) -> None:
        get(self.project, self.number)  # the citation must be in the table
        if (self.value is None) != (self.unit == ""):
            raise ValueError(f"anchor {self.project} #{self.number}: unit must be 'us' or 'ms' with a value, '' without")
        if self.unit not in ("", "us", "ms") or self.per < 1:
            raise ValueError(f"anchor {self.project} #{self.number}: unit must be '', 'us' or 'ms' and per >= 1")

    @property
    def source(self) -> str:
        return get(self.project, self.number).name

    @property
    def value_us(self) -> Optional[float]:
        return None if self.value is None else self.value * (1e3 if self.unit == "ms" else 1.0)


_ONE_ELEMENT = ("CUDA.@bprofile time=0.01 of CuArray([1]) .+ 1 (a one-element upload and broadcast, 525 times): "
                "the mean per call; GPU not named")
ANCHORS = (
    Anchor("CUDA.jl", 2162, "cuStreamSynchronize, host time per call", 0.30109, "us", _ONE_ELEMENT,
           (("stream_sync", 0, "empty"),)),
    Anchor("CUDA.jl", 2162, "cuLaunchKernel, host time per call", 3.48, "us", _ONE_ELEMENT,
           (("kernel_launch", 0, "empty"),)),
    Anchor("CUDA.jl", 2162, "cuMemcpyHtoDAsync, host time per call (source memory not stated)", 3.05, "us",
           _ONE_ELEMENT, (("copy:pinned_to_nb", 4, "empty"), ("copy:pageable_to_nb", 4, "empty"))),
    Anchor("SGLang", 29960, "cudaGraphLaunch host time of a 2,876-node verify graph", 2.826, "ms",
           "DeepSeek-V4-Flash on 2x RTX PRO 6000 Blackwell, TP2, PCIe; TP0 median of 12 cycles", (("graph_decode", 1000, "empty"),
                                                                    ("graph_linear", 1000, "empty")), per=2876),
    Anchor("vLLM", 47081, "spin-wait events busy-poll the driver (a TP rank straggled); fixed with blocking events",
           None, "", "vLLM tensor parallel", (("event_sync_spin", 0, "queued"), ("event_sync_blocking", 0, "queued"))),
    Anchor("vLLM", 49780, "a pin_memory() every step serialises on the host allocator (also vLLM #37006)", None, "",
           "vLLM", (("pin_fresh", 1 << 20, "empty"), ("pin_cached", 1 << 20, "empty"))),
    Anchor("SGLang", 29075, "a copy stream's cross-stream wait regressed decode 10-20% on ROCm (as its fix, #29642, states)",
           None, "", "SGLang decode on ROCm", (("wait_event", 0, "queued"), ("wait_stream", 0, "queued"))),
)
