"""`dspark-lab ep`: the draft step on N real ranks, headless, into a run file."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from dspark_lab.results.facts import strategy_table
from dspark_lab.cli.options import HelpFormatter, add_config_option, count_type, float_in
from dspark_lab.config import CAPTURE_BUCKETS, DEFAULT_TIMEOUT_S, FIELDS
from dspark_lab.predicate import DISPATCH_MODES

# The LabConfig fields `ep` sets (one batch size on every rank), and where its defaults are not the field's.
CONFIG_FIELDS = ("batch_size", "gamma", "model", "workload", "steps", "trials", "warmup")
DEFAULTS = {"steps": 50, "warmup": 5}
# Bounds that stop accidents (nan, inf or 1e6 ms made the ranks spin forever): a host
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
                    "beyond the GPUs present: `sweep` (ep_mode predicate_only) or results.analyses.ep_predict.",
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
    p.add_argument("--strategies", type=_csv(strategy_table.names(), "--strategies"), default=None,
                   help="comma list of strategies run on all ranks (default: all)")
    p.add_argument("--rank0-only", type=_csv(strategy_table.names(), "--rank0-only"), default=[strategy_table.BASELINE],
                   help=f"strategies run on rank 0 alone while the others run {strategy_table.SYNC_FREE}")
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
