"""`dspark-lab doctor`'s run (its options are cli/doctor.py's): the fingerprint, the probe, the card."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

import torch

from dspark_lab.measure import probe
from dspark_lab.results.analyses import card as card_results
from dspark_lab.results.analyses import card_host
from dspark_lab.results.analyses import card_primitives as prim_results
from dspark_lab.results.record import verify_record


def _flatten(d: dict, prefix: str = "") -> list[tuple[str, str]]:
    out = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.extend(_flatten(v, key + "."))
        elif isinstance(v, float):
            out.append((key, f"{v:.1f}"))
        elif isinstance(v, (list, tuple)):
            out.append((key, json.dumps(v)))
        else:
            out.append((key, str(v)))
    return out


def _table(pairs: Sequence[tuple[str, str]], title: str) -> str:
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join([title, "-" * len(title)] + [f"{k:<{width}}  {v}" for k, v in pairs])


def card_text(card: dict) -> str:
    """The card for a terminal: per queue, sources × sizes, then where a pageable copy starts to wait
    and the seeds' claims read against it."""
    f = card_results.frame(card)
    depth = max(card.get("queued_ms") or [0])
    parts = [f"platform card: {card_results.label(card)}",
             "cells: w waits for the queued work, c blocks for the copy itself, · returns at once (~ after it: "
             "the verdict is at the rule's edge); then the median host time of the call, µs",
             card_results.VERDICT_RULE, card_results.EDGE_RULE]
    for queue, title in (("queued", f"{depth:g} ms of GPU work queued"), ("empty", "GPU queue empty")):
        parts += ["", title, card_results.table(card, queue).to_string()]
    if card.get("trace_error"):
        parts += ["", f"the trace pass failed ({card['trace_error']}): no trace counts in this card"]
    bad = f[f["error"] != ""]
    if len(bad):
        parts += ["", "failed cells:"] + [f"  {r.direction} {r.source} {r.size}: {r.error}" for r in bad.itertuples()]
    parts += ["", card_results.threshold_in_words(card_results.wait_threshold(f)),
              card_results.threshold_in_words(card_results.wait_threshold(f, "d2h", "into_pageable_nb"))]
    parts += [""] + card_results.claims_in_words(card)
    parts += ["", "host: " + card_host.host_in_words(card)]
    return "\n".join(parts)


def primitives_text(card: dict) -> str:
    """The card's wait/launch cells for a terminal: the rule, the table, the graph fits, the anchors."""
    if not prim_results.has_primitives(card):
        return "wait/launch cells: none on this card (measured with doctor --card, --wait-reps > 0)"
    parts = ["wait/launch cells (· cheap, h costs host time, w waits, ~ at the rule's edge; median "
             "[fastest-slowest] µs per call; cpu: the process CPU time over the wait)", prim_results.PRIMITIVE_RULE,
             prim_results.table(card).to_string()]
    parts += [""] + prim_results.graph_fits_in_words(prim_results.frame(card))
    parts += ["", "published anchors beside this card (sources' own figures, not measured here):"]
    for r in prim_results.anchors_beside(card).itertuples():
        parts.append(f"  {r.source}: {r.quantity}: {r.published} [{r.setting}] | here: {r.measured_here}")
    return "\n".join(parts)


def _cards(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[Optional[dict], list[dict]]:
    """(this machine's card or None, the recorded cards to compare), or a usage error."""
    compare = list(args.compare or [])
    if args.card_out is not None and not args.card:
        parser.error("--card-out needs --card")
    if args.card and len(compare) > 1:
        parser.error("--compare with --card takes one recorded card (this machine is the other)")
    if compare and not args.card and len(compare) != 2:
        parser.error("--compare without --card takes two recorded cards")
    if args.reps < 1:
        parser.error(f"--reps must be a positive integer; got {args.reps}")
    if args.wait_reps != 0 and args.wait_reps < 3:
        parser.error(f"--wait-reps must be 0 (skip) or an integer >= 3; got {args.wait_reps}")
    try:
        recorded = [prim_results.validate(card_results.load(p), str(p)) for p in compare]
    except ValueError as e:
        parser.error(f"--compare: {e}")
    mine = None
    if args.card:
        from dspark_lab.measure import card as card_measure  # torch work only when asked

        mine = card_measure.measure_card(queued_ms=(0.0, args.queued_ms), reps=args.reps,
                                         progress=lambda s: print(s, file=sys.stderr, flush=True),
                                         primitive_reps=args.wait_reps or None)
        if args.card_out is not None:
            print(f"saved {card_results.save(mine, args.card_out)}", file=sys.stderr)
    return mine, recorded


def cmd_card(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.card and not torch.cuda.is_available():
        print("dspark-lab: the platform card needs a CUDA device (none is visible here); compare recorded cards "
              "with --compare A B", file=sys.stderr)
        return 1
    mine, recorded = _cards(args, parser)
    pair = ([mine] if mine is not None else []) + recorded
    if args.json:
        out = {"fingerprint": probe.fingerprint(), "card": mine}
        if len(pair) == 2:
            out["compare"] = card_results.compare(*pair).to_dict(orient="records")
            if all(prim_results.has_primitives(c) for c in pair):  # the wait/launch cells beside the copies
                out["compare_primitives"] = prim_results.compare(*pair).to_dict(orient="records")
        print(json.dumps(out, indent=1, default=str))
        return 0
    if mine is not None:
        print(card_text(mine))
    if len(pair) == 2:
        print()
        print("compared cell by cell (a: " + ("this machine, now" if mine is not None else str(args.compare[0]))
              + f"; b: {args.compare[-1]})")
        print("\n".join(card_results.compare_lines(*pair)))
        print("\n".join(prim_results.compare_lines(*pair)))
    if mine is not None:  # the wait/launch cells last: the short table a reader of the log looks for
        print()
        print(primitives_text(mine))
    return 0


def cmd_doctor(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.card or args.compare or args.card_out is not None:
        return cmd_card(args, parser)
    fp = probe.fingerprint()
    pr = probe.run_probe() if args.probe else None
    verified = verify_record.newest_for(fp)
    if args.json:
        print(json.dumps({"fingerprint": fp, "probe": pr, "verified": verify_record.summary_line(verified),
                          "verify_record": verified}, indent=2, default=str))
        return 0
    print(_table(_flatten(fp), "fingerprint"))
    print(verify_record.summary_line(verified))
    if pr is not None:
        print()
        if pr.get("available"):
            print(_table(_flatten(pr), "probe (host time of one call, µs: GPU idle / with work queued)"))
            print()
        print("probe: " + probe.describe(pr))
    return 0
