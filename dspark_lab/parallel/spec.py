"""A point as it is measured, in one process or on real ranks: its spec (what identifies it), the
record of each timed trial, and the result both executors return.

A point is a config, a world size and a dispatch mode. One process is the world-size-1 case (no
ranks joined, so no dispatch), and there EP > 1 only flips the predicate (schema.RANK_COLUMNS);
parallel/ runs real ranks. The spec is fixed before anything is measured: nobody fills in a row's
identity afterwards. A trial becomes a row in one place (`TrialRecord.row`, through
results.record.rows.build_row), once: on real ranks the columns that compare the ranks are in the
record before its row is built. Rows are checked where they are written (the run writer takes each
as a results.record.row_record.RowRecord) and where they are loaded (results.loading).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Mapping, Optional

from dspark_lab.config import LabConfig
from dspark_lab.measure.timing import TrialTiming
from dspark_lab.model.dispatch import check_mode
from dspark_lab.predicate import enable_num_token_non_padded
from dspark_lab.results.record import rows as rowbuild
from dspark_lab.results.record.schema import RANK_COLUMNS


@dataclass(frozen=True)
class PointSpec:
    """One point's identity. `dispatch` is "" in one process and one of model.dispatch.DISPATCH_MODES
    on real ranks (world_size > 1)."""

    cfg: LabConfig
    world_size: int = 1
    dispatch: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.cfg, LabConfig):
            raise ValueError(f"cfg must be a LabConfig; got {type(self.cfg).__name__}")
        if not isinstance(self.world_size, int) or isinstance(self.world_size, bool) or self.world_size < 1:
            raise ValueError(f"world_size must be a whole number >= 1; got {self.world_size!r}")
        if self.world_size == 1 and self.dispatch:  # no ranks joined: nothing is dispatched between them
            object.__setattr__(self, "dispatch", "")
        elif self.world_size > 1:
            check_mode(self.dispatch)

    @classmethod
    def on_ranks(cls, cfg: LabConfig, world_size: int, dispatch: str, device: str) -> "PointSpec":
        """The point `world_size` ranks measure on `device`: real ranks make the EP size the world size."""
        return cls(cfg.with_(ep_size=world_size if world_size > 1 else cfg.ep_size, device=device),
                   world_size, dispatch)

    @property
    def point_id(self) -> str:
        """A stable hash of the config without the strategy (a sweep resumes by it); world size and
        dispatch join it on real ranks only, so one process keeps the ids it has always recorded."""
        d = self.cfg.to_dict()
        d.pop("strategy")
        if self.world_size > 1:
            d.update(world_size=self.world_size, dispatch=self.dispatch)
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def ep_mode(self) -> str:
        """"real" on joined ranks, "predicate_only" for EP > 1 in one process, else "single"."""
        if self.world_size > 1:
            return "real"
        return "predicate_only" if self.cfg.ep_size > 1 else "single"

    def columns(self, strategy: str, rank_cfg: Optional[LabConfig] = None, where: Optional[Mapping] = None) -> dict:
        """The identity columns of a row of `strategy`. On real ranks, `rank_cfg` is the rank's own
        config (its own batch) and `where` its own rank columns (rank, case, host delay, ...): the
        row then carries every rank column, in schema order."""
        cols = self._config_columns(strategy, rank_cfg or self.cfg)
        if not where:
            return cols
        ranked = {c: cols.pop(c, None) for c in RANK_COLUMNS}
        return {**cols, **ranked, **where}

    def _config_columns(self, strategy: str, c: LabConfig) -> dict:
        return dict(
            point_id=self.point_id, ep_size=c.ep_size, batch_size=c.batch_size, gamma=c.gamma,
            strategy=strategy, model=c.model, workload=c.workload, graph=c.graph, device=c.resolved_device(),
            query_token_num=c.query_token_num, bucket_batch_size=c.bucket_batch_size, num_tokens=c.num_tokens,
            target_verify_ms=c.workload_costs.target_verify_ms, predicate=enable_num_token_non_padded(c.parallel),
            rank=0, world_size=self.world_size, ep_mode=self.ep_mode, dispatch=self.dispatch,
        )

    def failed_rows(self, strategies, error: BaseException) -> list[dict]:
        """One failed row per strategy for a point whose measurement raised."""
        return rowbuild.failed_rows(self.columns(""), strategies, error)


@dataclass(frozen=True)
class PointPlan:
    """What to measure: the point and its strategies, in the order measured."""

    spec: PointSpec
    names: tuple

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(self.names))
        if not self.names:
            raise ValueError("names must hold at least one strategy")


@dataclass(frozen=True)
class TrialRecord:
    """What one timed trial measured: its timing, and the point x strategy's profiled columns
    (`measured`, empty before the profiled pass); on real ranks, the rank's own config and columns
    (PointSpec.columns), and the columns that compare it with the other ranks' trials (`compared`:
    step_ms_max_rank, blocked_from_others_ms, collective_from_others_ms; known on rank 0 once every
    rank's records are gathered, before any row is built)."""

    spec: PointSpec
    strategy: str
    timing: TrialTiming
    measured: Mapping = field(default_factory=dict)
    where: Mapping = field(default_factory=dict)
    rank_cfg: Optional[LabConfig] = None
    compared: Mapping = field(default_factory=dict)

    def value(self, column: str):
        """A measured or diagnostic value of the trial (None where it has none), as its row will hold it."""
        return self.timing.diag.get(column, self.measured.get(column))

    def row(self) -> dict:
        """The trial's row (results.record.rows.build_row): identity, where, timing, diagnostics,
        measured, compared."""
        t = self.timing
        return rowbuild.build_row(
            **{**self.spec.columns(self.strategy, self.rank_cfg, self.where), **self.measured, **t.diag, **self.compared},
            status="ok", error="", trial=t.trial, steps=t.steps, step_ms=t.step_ms, step_ms_p50=t.p50,
            step_ms_p90=t.p90)


@dataclass
class PointResult:
    """A measured point, from one process (run.point) or from every rank (parallel.measure, on rank 0)."""

    rows: list
    timelines: list
    traces: dict = field(default_factory=dict)
    outputs_identical: Optional[bool] = None  # draft tokens equal across strategies after the trials
    analysed_in: Optional[str] = "this process"  # or "a worker process" (measure.analysis_worker), or why not
    samples: dict = field(default_factory=dict)  # ranks: case -> rank -> per-step host-clock ms (all trials)
    info: dict = field(default_factory=dict)  # ranks: world size, backend, dispatch, bucket, point id, graph
    # Ranks: {case: strategy} of the cases where every rank runs that one strategy as it is: their
    # rank 0 stands for the point (the ranks run in lockstep; every row carries step_ms_max_rank).
    point_cases: dict = field(default_factory=dict)

    def point_rows(self) -> list:
        """The rows that stand for the point: all of one process's; rank 0's of `point_cases` on ranks."""
        if not self.point_cases:
            return list(self.rows)
        return [r for r in self.rows if r["rank"] == 0 and r["rank_case"] in self.point_cases]

    def point_timelines(self) -> list:
        """The timelines that stand for the point, keyed by strategy as the figures expect."""
        if not self.point_cases:
            return list(self.timelines)
        return [dict(t, strategy=self.point_cases[t["rank_case"]]) for t in self.timelines
                if t["rank"] == 0 and t["rank_case"] in self.point_cases]
