"""`dspark-lab ep`: the draft step on N real ranks, headless, into a run file."""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from dspark_lab import strategies as strategy_registry
from dspark_lab.cli.exits import EXIT_CANNOT_WRITE, EXIT_FAILED, EXIT_OK
from dspark_lab.cli.options import HelpFormatter, add_config_option, count_type, float_in
from dspark_lab.cli.terminal import err, say
from dspark_lab.config import CAPTURE_BUCKETS, FIELDS, LabConfig
from dspark_lab.model.dispatch import DISPATCH_MODES
from dspark_lab.parallel import torchrun
from dspark_lab.parallel.ranks import DEFAULT_TIMEOUT_S
from dspark_lab.parallel.run import check_world, run_ep, standard_cases
from dspark_lab.parallel.workers import WorkerError, resolve_backend
from dspark_lab.results.record import store

# The LabConfig fields `ep` sets (one batch size on every rank), and where its defaults are not the field's.
CONFIG_FIELDS = ("batch_size", "gamma", "model", "workload", "steps", "trials", "warmup")
DEFAULTS = {"steps": 50, "warmup": 5}
# Bounds that stop accidents (issue 22: nan, inf or 1e6 ms made the ranks spin forever): a host
# delay or jitter of a second per step is far past any real host hiccup.
MAX_HOST_MS = 1000.0
LAUNCHERS = ("workers", "torchrun")
DEFAULT_WORLD = 2  # the single-host worker group's ranks when --world is not given


def max_cpu_world() -> int:
    """gloo ranks on the host: at most one per CPU core (at least 2, to show EP at all)."""
    return max(2, os.cpu_count() or 1)


def _batch_list(text: str) -> list:
    try:
        sizes = [int(x) for x in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or not all(1 <= b <= CAPTURE_BUCKETS[-1] for b in sizes):
        raise argparse.ArgumentTypeError(f"must be a comma list of batch sizes, each 1 to {CAPTURE_BUCKETS[-1]}; "
                                         f"got {text!r:.60}")
    return sizes


def _csv(allowed, field):
    def parse(text: str) -> list:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"{field} must be a comma list of {', '.join(allowed)}; got {text!r}")
        return items
    return parse


def add_ep_parser(sub) -> None:
    p = sub.add_parser(
        "ep", formatter_class=HelpFormatter,
        help="measure the draft step on N real ranks (one process per GPU, NCCL; gloo on CPU)",
        description="Start one process per rank (up to the GPUs present; on CPU, gloo ranks), measure every "
                    "dispatch mode x case on every rank and write one run file whose header records the world "
                    "size, backend, NCCL version and dispatch modes. Cases: every strategy on all ranks, only "
                    "rank 0 running --rank0-only, a host delay on rank 0, host jitter on every rank. EP sizes "
                    "beyond the GPUs present: `sweep` (ep_mode predicate_only) or results.ep_predict.",
    )
    p.add_argument("--launcher", choices=LAUNCHERS, default="workers",
                   help="workers: start one process per rank on this host; torchrun: this process is one rank "
                        "that torchrun started (RANK / LOCAL_RANK / WORLD_SIZE from the environment; rank 0 "
                        "writes the run file)")
    p.add_argument("--world", type=count_type(1), default=None,
                   help=f"ranks (EP size): a divisor of the model's experts, at most the GPUs present "
                        f"(on CPU: at most one gloo rank per core); default {DEFAULT_WORLD}, under torchrun its "
                        "WORLD_SIZE (which it must match)")
    p.add_argument("--dispatch", type=_csv(DISPATCH_MODES, "--dispatch"), default=list(DISPATCH_MODES),
                   help=f"comma list of {', '.join(DISPATCH_MODES)}")
    p.add_argument("--strategies", type=_csv(strategy_registry.names(), "--strategies"), default=None,
                   help="comma list of strategies run on all ranks (default: all)")
    p.add_argument("--rank0-only", type=_csv(strategy_registry.names(), "--rank0-only"), default=["device_direct"],
                   help="strategies run on rank 0 alone while the others run non_blocking")
    p.add_argument("--rank0-delay-ms", type=float_in(0, MAX_HOST_MS), default=0.0,
                   help=f"added host delay on rank 0 (ms, 0 to {MAX_HOST_MS:g})")
    p.add_argument("--jitter-ms", type=float_in(0, MAX_HOST_MS), default=0.0,
                   help=f"random host jitter per rank, uniform 0..J ms (0 to {MAX_HOST_MS:g})")
    p.add_argument("--batch-sizes", type=_batch_list, default=None,
                   help="one real batch per rank, comma list of --world sizes (default: --batch-size on every rank)")
    for name in CONFIG_FIELDS:
        default = DEFAULTS.get(name, FIELDS[name].default)
        add_config_option(p, name, default=default, shown=default)
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--profile-steps", type=count_type(1), default=12, help="steps per case in the profiled pass")
    p.add_argument("--check-reference", action="store_true",
                   help="first compare every rank's output with the one-process reference, per dispatch mode "
                        "(recorded in the run file's header as reference_check)")
    p.add_argument("--timeout-s", type=float_in(1, 86400), default=DEFAULT_TIMEOUT_S,
                   help="under torchrun: how long a rank waits to join, and in any one collective, before it "
                        "stops with an error (a rank that died mid-run)")
    p.add_argument("--out", type=Path, default=None, metavar="PATH", help="run file or folder (default: data/runs/)")
    p.set_defaults(func=cmd_ep)


def _cases(args: argparse.Namespace, world: int):
    return standard_cases(world, args.strategies, rank0_only=args.rank0_only, rank0_delay_ms=args.rank0_delay_ms,
                          jitter_ms=args.jitter_ms)


def check_ep_args(args: argparse.Namespace, parser: argparse.ArgumentParser):
    """Every option checked before a rank is spawned or a file created (issue 22); returns
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
    if args.launcher == "torchrun":
        return _cmd_ep_torchrun(args, parser)
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
