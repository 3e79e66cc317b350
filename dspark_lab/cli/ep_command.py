"""`dspark-lab ep`'s run (its options are cli/ep.py's): the ranks started or joined, measured, written."""
from __future__ import annotations

import argparse
import os
import sys

from dspark_lab.cli.ep import CONFIG_FIELDS, DEFAULT_WORLD, max_cpu_world
from dspark_lab.cli.exits import EXIT_CANNOT_WRITE, EXIT_FAILED, EXIT_OK, sigterm_as_interrupt
from dspark_lab.cli.needs_cuda import cuda_available, refuse
from dspark_lab.cli.terminal import err, say
from dspark_lab.config import LabConfig
from dspark_lab.parallel import torchrun
from dspark_lab.parallel.run import check_world, run_ep, standard_cases
from dspark_lab.parallel.workers import WorkerError, resolve_backend
from dspark_lab.results.record import store


def _cases(args: argparse.Namespace, world: int):
    return standard_cases(world, args.strategies, rank0_only=args.rank0_only, rank0_delay_ms=args.rank0_delay_ms,
                          jitter_ms=args.jitter_ms)


def check_ep_args(args: argparse.Namespace, parser: argparse.ArgumentParser):
    """Every option checked before a rank is spawned or a file created; returns
    (config, cases). Errors: parser.error naming the option (exit 2)."""
    args.world = args.world or DEFAULT_WORLD
    try:
        cfg = LabConfig(**{name: getattr(args, name) for name in CONFIG_FIELDS})
    except ValueError as e:
        parser.error(str(e))
    try:
        cfg.with_(ep_size=args.world)  # the model's experts split over the ranks
        backend = resolve_backend(args.backend)
        check_world(args.world, backend)
    except ValueError as e:
        parser.error(f"argument --world: {e}")
    if backend == "gloo" and args.world > max_cpu_world():
        parser.error(f"argument --world: at most {max_cpu_world()} gloo ranks on this host's "
                     f"{os.cpu_count()} CPU cores; got {args.world}")
    if args.batch_sizes is not None and len(args.batch_sizes) != args.world:
        parser.error(f"argument --batch-sizes: one batch size per rank ({args.world}); got {len(args.batch_sizes)}")
    try:
        store.new_run_path(args.out, "<run_id>")
    except store.RunPathError as e:
        parser.error(f"argument --out: {e}")
    return cfg, _cases(args, args.world)


def _print_summary(res: dict, dispatches) -> None:
    say(f"wrote {res['path']}")
    for d in dispatches:
        rows = [r for r in res[d].rows if r["rank"] == 0]
        for case in dict.fromkeys(r["rank_case"] for r in rows):
            steps = sorted(r["step_ms_max_rank"] for r in rows if r["rank_case"] == case)
            print(f"{d:12s} {case:50s} {steps[len(steps) // 2]:8.3f} ms (max over ranks, median trial)")


def _on_point(d: str, r) -> None:
    print(f"{d}: {len(r.rows)} rows", file=sys.stderr, flush=True)


def cmd_ep(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    # SIGTERM (timeout, Slurm) ends the command as Ctrl-C does: no header-only run file, no rank left.
    if args.backend == "auto" and not cuda_available():  # auto would start gloo ranks and measure for minutes
        return refuse("ep", "`--backend gloo` runs the ranks on the CPU instead (slow; a CPU-only run)")
    with sigterm_as_interrupt():
        if args.launcher == "torchrun":
            return _cmd_ep_torchrun(args, parser)
        return _cmd_ep_workers(args, parser)


def _cmd_ep_workers(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    cfg, cases = check_ep_args(args, parser)
    try:
        res = run_ep(cfg, args.world, args.dispatch, cases, out=args.out, backend=args.backend,
                     batch_sizes=args.batch_sizes, profile_steps=args.profile_steps,
                     check_reference=args.check_reference, on_point=_on_point)
    except ValueError as e:
        parser.error(str(e))
    except (WorkerError, TimeoutError) as e:  # a rank died, was stopped or hung: no run file is left
        lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()] or [type(e).__name__]
        # A rank's traceback: "rank N" and its last line (the exception) make the one line.
        err(f"ep: {lines[0] if len(lines) == 1 else lines[0].split(':', 1)[0] + ': ' + lines[-1]}")
        return EXIT_FAILED
    except store.RunPathError as e:
        parser.error(f"argument --out: {e}")
    except OSError as e:
        err(f"argument --out: cannot create a run file at {args.out} ({e.strerror or e})")
        return EXIT_CANNOT_WRITE
    _print_summary(res, args.dispatch)
    return EXIT_OK


def _cmd_ep_torchrun(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """One rank of a torchrun job: bad options exit 2 on every rank, a rank that stops exits 1."""
    options = {k: v for k, v in vars(args).items() if k != "func"}
    try:
        cfg = LabConfig(**{name: getattr(args, name) for name in CONFIG_FIELDS})
        ctx = torchrun.join_from_env(args.backend, args.timeout_s)
    except ValueError as e:
        parser.error(str(e))
    except RuntimeError as e:  # no rendezvous: the message names the endpoint
        err(f"ep: {e}")
        return EXIT_FAILED
    try:
        try:
            ranks = torchrun.check_same_options(ctx, options)
            if args.world is not None and args.world != ctx.world_size:
                raise ValueError(f"--world {args.world} does not match torchrun's WORLD_SIZE {ctx.world_size} "
                                 "(--nnodes x --nproc-per-node); leave --world out under torchrun")
            cfg.with_(ep_size=ctx.world_size)  # the world must split the model's experts: refused here, on every rank
            res = torchrun.run_ranks(ctx, cfg, args.dispatch, _cases(args, ctx.world_size), ranks=ranks, out=args.out,
                                     batch_sizes=args.batch_sizes, profile_steps=args.profile_steps,
                                     check_reference=args.check_reference, on_point=_on_point)
        except ValueError as e:
            err(f"ep: rank {ctx.rank}: {e}")
            return 2
        except (RuntimeError, OSError) as e:  # a peer left, a timeout, or rank 0 could not write
            err(f"ep: {e}")
            return EXIT_FAILED
    finally:
        ctx.shutdown()
    if res is not None:
        _print_summary(res, args.dispatch)
    return EXIT_OK
