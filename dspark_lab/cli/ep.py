"""`dspark-lab ep`: the draft step on N real ranks, headless, into a run file.

Two launchers, one per-rank code path: without --launcher the CLI starts its own worker group on
this host (parallel/workers.py); `--launcher torchrun` is run by every rank that torchrun (or
`srun ... torchrun`) starts, and rank 0 writes the run file (parallel/torchrun.py)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dspark_lab import strategies as strategy_registry
from dspark_lab.cli.options import HelpFormatter, add_config_option, count_type
from dspark_lab.config import FIELDS, LabConfig
from dspark_lab.model.dispatch import DISPATCH_MODES
from dspark_lab.parallel import torchrun
from dspark_lab.parallel.ranks import DEFAULT_TIMEOUT_S
from dspark_lab.parallel.run import run_ep, standard_cases

# The LabConfig fields `ep` sets (one batch size on every rank), and where its defaults are not the field's.
CONFIG_FIELDS = ("batch_size", "gamma", "model", "workload", "steps", "trials", "warmup")
DEFAULTS = {"steps": 50, "warmup": 5}
LAUNCHERS = ("workers", "torchrun")
DEFAULT_WORLD = 2  # the single-host worker group's ranks when --world is not given
EXIT_RANK_FAILED = 1  # under torchrun: this rank stopped (a peer left, a timeout, no rendezvous)


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
    p.add_argument("--world", type=int, default=None,
                   help=f"ranks (EP size); default {DEFAULT_WORLD}, under torchrun its WORLD_SIZE (which it must match)")
    p.add_argument("--dispatch", type=_csv(DISPATCH_MODES, "--dispatch"), default=list(DISPATCH_MODES),
                   help=f"comma list of {', '.join(DISPATCH_MODES)}")
    p.add_argument("--strategies", type=_csv(strategy_registry.names(), "--strategies"), default=None,
                   help="comma list of strategies run on all ranks (default: all)")
    p.add_argument("--rank0-only", type=_csv(strategy_registry.names(), "--rank0-only"), default=["device_direct"],
                   help="strategies run on rank 0 alone while the others run non_blocking")
    p.add_argument("--rank0-delay-ms", type=float, default=0.0, help="added host delay on rank 0 (ms)")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="random host jitter per rank, uniform 0..J ms")
    p.add_argument("--batch-sizes", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="one real batch per rank, comma list (default: --batch-size on every rank)")
    for name in CONFIG_FIELDS:
        default = DEFAULTS.get(name, FIELDS[name].default)
        add_config_option(p, name, default=default, shown=default)
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    p.add_argument("--profile-steps", type=count_type(1), default=12, help="steps per case in the profiled pass")
    p.add_argument("--check-reference", action="store_true",
                   help="first compare every rank's output with the one-process reference, per dispatch mode "
                        "(recorded in the run file's header as reference_check)")
    p.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S,
                   help="under torchrun: how long a rank waits to join, and in any one collective, before it "
                        "stops with an error (a rank that died mid-run)")
    p.add_argument("--out", type=Path, default=None, metavar="PATH", help="run file or folder (default: data/runs/)")
    p.set_defaults(func=cmd_ep)


def _cases(args: argparse.Namespace, world: int):
    return standard_cases(world, args.strategies, rank0_only=args.rank0_only, rank0_delay_ms=args.rank0_delay_ms,
                          jitter_ms=args.jitter_ms)


def _print_summary(res: dict, dispatches) -> None:
    print(f"wrote {res['path']}")
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
    world = args.world or DEFAULT_WORLD
    try:
        cfg = LabConfig(**{name: getattr(args, name) for name in CONFIG_FIELDS})
        res = run_ep(cfg, world, args.dispatch, _cases(args, world), out=args.out, backend=args.backend,
                     batch_sizes=args.batch_sizes, profile_steps=args.profile_steps,
                     check_reference=args.check_reference, on_point=_on_point)
    except ValueError as e:
        parser.error(str(e))
    _print_summary(res, args.dispatch)
    return 0


def _cmd_ep_torchrun(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """One rank of a torchrun job: bad options exit 2 on every rank, a rank that stops exits 1."""
    options = {k: v for k, v in vars(args).items() if k != "func"}
    try:
        cfg = LabConfig(**{name: getattr(args, name) for name in CONFIG_FIELDS})
        ctx = torchrun.join_from_env(args.backend, args.timeout_s)
    except ValueError as e:
        parser.error(str(e))
    except RuntimeError as e:  # no rendezvous: the message names the endpoint
        print(f"dspark-lab ep: {e}", file=sys.stderr)
        return EXIT_RANK_FAILED
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
            print(f"dspark-lab ep: rank {ctx.rank}: {e}", file=sys.stderr)
            return 2
        except (RuntimeError, OSError) as e:  # a peer left, a timeout, or rank 0 could not write
            print(f"dspark-lab ep: {e}", file=sys.stderr)
            return EXIT_RANK_FAILED
    finally:
        ctx.shutdown()
    if res is not None:
        _print_summary(res, args.dispatch)
    return 0
