"""`dspark-lab ep`: the draft step on N real ranks, headless, into a run file."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dspark_lab import strategies as strategy_registry
from dspark_lab.cli.options import HelpFormatter, add_config_option
from dspark_lab.config import FIELDS, LabConfig
from dspark_lab.model.dispatch import DISPATCH_MODES
from dspark_lab.parallel.run import run_ep, standard_cases

# The LabConfig fields `ep` sets (one batch size on every rank), and where its defaults are not the field's.
CONFIG_FIELDS = ("batch_size", "gamma", "model", "workload", "steps", "trials", "warmup")
DEFAULTS = {"steps": 50, "warmup": 5}


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
    p.add_argument("--world", type=int, default=2, help="ranks (EP size)")
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
    p.add_argument("--out", type=Path, default=None, metavar="PATH", help="run file or folder (default: data/runs/)")
    p.set_defaults(func=cmd_ep)


def cmd_ep(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        cfg = LabConfig(**{name: getattr(args, name) for name in CONFIG_FIELDS})
        cases = standard_cases(args.world, args.strategies, rank0_only=args.rank0_only,
                               rank0_delay_ms=args.rank0_delay_ms, jitter_ms=args.jitter_ms)
        res = run_ep(cfg, args.world, args.dispatch, cases, out=args.out, backend=args.backend,
                     batch_sizes=args.batch_sizes,
                     on_point=lambda d, r: print(f"{d}: {len(r.rows)} rows", file=sys.stderr))
    except ValueError as e:
        parser.error(str(e))
    print(f"wrote {res['path']}")
    for d in args.dispatch:
        rows = [r for r in res[d].rows if r["rank"] == 0]
        for case in dict.fromkeys(r["rank_case"] for r in rows):
            steps = sorted(r["step_ms_max_rank"] for r in rows if r["rank_case"] == case)
            print(f"{d:12s} {case:50s} {steps[len(steps) // 2]:8.3f} ms (max over ranks, median trial)")
    return 0
