"""The EP measurement under torchrun (or any launcher that sets torch.distributed's environment).

`torchrun --nnodes=N --nproc-per-node=M --rdzv-backend=c10d --rdzv-endpoint=HOST:PORT --rdzv-conf
join_timeout=T --no-python dspark-lab ep --launcher torchrun --timeout-s T ...` starts every rank
itself; this module is what each rank runs. A rank waits at most --timeout-s to join and in any one
collective; the agent's rendezvous, before any rank starts, is bounded by torchrun's join_timeout
(600 s unless given).
It is the second launcher of one per-rank code path: ranks join through ranks.init_rank, measure
with measure.measure_ranks (each rank's PointRun on a RankExecutor, which gathers every rank's
records to rank 0 over the process group; there a PointWriter observer writes the point),
and check against the one-process reference with checks.equivalence, exactly as the single-host
WorkerGroup's ranks do; rank 0 alone writes the run file (run.create_writer, the same header).

Faults: every rank first gathers every rank's options and their hash, so ranks started
with different options stop before measuring, with the differing options named; a rank that cannot
join fails naming MASTER_ADDR:MASTER_PORT; a rank that dies mid-run makes the others' next
collective fail (gloo sees the closed connection; NCCL's watchdog aborts after the timeout), and
rank 0 then records the unfinished point as failed, never as ok.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Callable, Optional, Sequence

from dspark_lab.config import LabConfig
from dspark_lab.measure.probe import fingerprint as fp
from dspark_lab.model.dispatch import check_mode
from dspark_lab.parallel import checks
from dspark_lab.parallel.measure import RankCase, measure_ranks, unfinished_rows
from dspark_lab.parallel.orchestrator import PointObserver
from dspark_lab.parallel.spec import PointResult
from dspark_lab.config import DEFAULT_TIMEOUT_S
from dspark_lab.parallel.ranks import RankContext, env_int, init_rank
from dspark_lab.parallel.run import create_writer, point_observers, reference_args
from dspark_lab.parallel.workers import apply_nccl_safe_env, die_with_parent, resolve_backend

# What torchrun (and `srun` with the same variables) sets for every rank.
REQUIRED_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


class OptionsMismatch(ValueError):
    """Ranks were started with different options; the message names them."""


class RankFailed(RuntimeError):
    """The run stopped on this rank: another rank left the group, or a collective timed out."""


def join_from_env(backend: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S) -> RankContext:
    """Join the group torchrun describes in the environment; this rank's device is LOCAL_RANK's GPU."""
    missing = [k for k in REQUIRED_ENV if k not in os.environ]
    if missing:
        raise ValueError(f"--launcher torchrun needs {', '.join(REQUIRED_ENV)} in the environment (torchrun sets "
                         f"them); missing: {', '.join(missing)}. Run it under torchrun, or leave out --launcher "
                         "for the single-host worker group")
    if timeout_s <= 0:
        raise ValueError(f"--timeout-s must be > 0; got {timeout_s!r}")
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):  # each named when it is not an integer, before anything starts
        env_int(name, None, 1 if name == "WORLD_SIZE" else 0)
    die_with_parent(os.getppid())  # no rank outlives its agent (a killed node takes its ranks with it)
    apply_nccl_safe_env()
    return init_rank(resolve_backend(backend), timeout_s)


def options_digest(options: dict) -> str:
    return hashlib.sha256(json.dumps(options, sort_keys=True, default=str).encode()).hexdigest()


def option_differences(per_rank: Sequence[dict]) -> dict[str, dict[int, object]]:
    """{option: {rank: value}} for every option whose value is not rank 0's on some rank."""
    first = per_rank[0]
    keys = sorted(set().union(*per_rank))
    return {k: {r: o.get(k) for r, o in enumerate(per_rank)} for k in keys
            if any(o.get(k) != first.get(k) for o in per_rank)}


def check_same_options(ctx: RankContext, options: dict) -> list[dict]:
    """Gather every rank's options (and RankContext.describe()); raise OptionsMismatch on every rank
    when their hashes differ. Returns the ranks' descriptions, in rank order."""
    mine = (options_digest(options), json.loads(json.dumps(options, default=str)), ctx.describe())
    everyone = ctx.all_gather_object(mine)
    if len({digest for digest, _, _ in everyone}) > 1:
        diffs = option_differences([o for _, o, _ in everyone])
        named = "; ".join(f"--{k.replace('_', '-')}: " + ", ".join(f"rank {r} {v!r}" for r, v in vals.items())
                          for k, vals in diffs.items())
        raise OptionsMismatch(f"ranks were started with different options ({named}); start every node with the "
                              "same `dspark-lab ep` options")
    return [d for _, _, d in everyone]


def _agree(ctx: RankContext, error: Optional[BaseException]) -> None:
    """Every rank learns whether rank 0 could go on (e.g. create the run file), so none waits alone."""
    errors = ctx.all_gather_object(None if error is None else f"{type(error).__name__}: {error}")
    if errors[0] is not None:
        if error is not None:
            raise error
        raise RankFailed(f"rank 0 stopped before measuring: {errors[0]}")


def _rank0_writer(ctx: RankContext, out, cfg: LabConfig, dispatches: Sequence[str], cases: Sequence[RankCase], *,
                  batch_sizes, ranks: Sequence[dict], fingerprint: Optional[dict], reference):
    """Rank 0's run file (None on the other ranks), every rank told whether it could be made."""
    writer, error = None, None
    if ctx.rank == 0:
        try:
            writer = create_writer(out, cfg, ctx.world_size, dispatches, cases, backend=ctx.backend,
                                   batch_sizes=batch_sizes, fingerprint=fingerprint if fingerprint is not None else fp(),
                                   rank0=ranks[0], launcher="torchrun", reference_check=reference,
                                   nodes=len({r["node_rank"] for r in ranks}),
                                   ranks=[{k: r[k] for k in ("rank", "node", "node_rank", "local_rank")} for r in ranks])
        except Exception as e:  # noqa: BLE001 - every rank is told, then it is raised here
            error = e
    _agree(ctx, error)
    return writer


class _Finished(PointObserver):
    """Whether the point run got as far as its result (rank 0 only)."""

    done = False

    def on_done(self, result: PointResult) -> None:
        self.done = True


def run_ranks(ctx: RankContext, cfg: LabConfig, dispatches: Sequence[str], cases: Sequence[RankCase], *,
              ranks: Sequence[dict], out=None, batch_sizes=None, profile_steps: int = 12,
              check_reference: bool = False, fingerprint: Optional[dict] = None,
              on_point: Optional[Callable[[str, PointResult], None]] = None) -> Optional[dict]:
    """Run on every rank: each dispatch mode x case measured by all ranks, written by rank 0 alone.
    `ranks` are the ranks' descriptions (check_same_options). Returns, on rank 0, {dispatch:
    PointResult} and the run file's path under "path"; None on the other ranks."""
    for d in dispatches:
        check_mode(d)
    world = ctx.world_size
    reference = None
    if check_reference:
        per_rank = ctx.all_gather_object(checks.equivalence(ctx, **reference_args(cfg, world, dispatches, batch_sizes)))
        reference = checks.reference_summary(per_rank, dispatches)
    writer = _rank0_writer(ctx, out, cfg, dispatches, cases, batch_sizes=batch_sizes, ranks=ranks,
                           fingerprint=fingerprint, reference=reference)
    results: dict = {}
    try:
        for d in dispatches:
            finished = _Finished()  # told first: a writer's or on_point's error is not a point that did not finish
            try:  # this rank's PointRun (measure_ranks); on rank 0 its observers write the point
                res = measure_ranks(ctx, cfg=cfg, dispatch=d, cases=cases, batch_sizes=batch_sizes,
                                    profile_steps=profile_steps,
                                    observers=[finished, *point_observers(writer, d, on_point)])
            except Exception as e:  # noqa: BLE001 - recorded as failed, then raised as RankFailed
                if finished.done:
                    raise
                if writer is not None:
                    pid, rows = unfinished_rows(ctx, cfg, d, cases, e, batch_sizes=batch_sizes)
                    writer.write_point(pid, rows, status="failed")
                raise RankFailed(f"rank {ctx.rank} (node {ctx.node_rank}, {ctx.node}): the {d} point did not finish "
                                 f"(another rank left the group, or a collective exceeded the timeout): "
                                 f"{type(e).__name__}: {e}") from e
            if writer is not None:
                results[d] = res
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        return None
    results["path"] = writer.path
    return results
