"""`dspark-lab doctor`: this machine's fingerprint and the pageable-copy probe, as a table or JSON;
with --card the platform card (every kind of copy by size and source) and --compare a recorded one."""
from __future__ import annotations

from pathlib import Path

from dspark_lab.cli.options import HelpFormatter, float_in


def add_doctor_parser(sub) -> None:
    p = sub.add_parser(
        "doctor", formatter_class=HelpFormatter,
        help="print this machine's fingerprint and the pageable-copy probe",
        description="Print the machine fingerprint (GPU, driver, CUDA, torch, ...) and, on a CUDA machine, "
                    "whether a non-blocking copy from pageable memory blocks the host, with each strategy's "
                    "host cost per call.",
    )
    p.add_argument("--no-probe", dest="probe", action="store_false", help="skip the probe (fingerprint only)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--card", action="store_true",
                   help="measure this machine's platform card (needs CUDA; the card records its wall time); the probe's one cell is a "
                        "cell of it, so the probe is skipped")
    p.add_argument("--card-out", type=Path, metavar="FILE",
                   help="with --card: save the card there (e.g. data/machines/<gpu>-card-<date>.json)")
    p.add_argument("--compare", nargs="+", type=Path, metavar="CARD",
                   help="with --card: compare this machine's card with one recorded card; without: compare two "
                        "recorded cards (no GPU needed); with --json the copy cells' comparison and, where both "
                        "cards have them, the wait/launch cells' (compare_primitives)")
    p.add_argument("--reps", type=int, default=5, help="with --card: repeats per cell (median and spread)")
    p.add_argument("--wait-reps", type=int, default=21,
                   help="with --card: repeats per wait/launch cell (syncs, events, streams, launches, CUDA graphs, "
                        "pin_memory); 0 skips those cells")
    p.add_argument("--queued-ms", type=float_in(0.5, 200.0), default=10.0,
                   help="with --card: GPU work queued ahead of the call in the queued cells, ms")
