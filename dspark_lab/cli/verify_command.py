"""`dspark-lab verify`'s run (its options are cli/verify.py's)."""
from __future__ import annotations

import argparse
import json
import sys

from dspark_lab.cli.exits import EXIT_CANNOT_WRITE, EXIT_FAILED, EXIT_OK
from dspark_lab.cli.terminal import err
from dspark_lab.cli.exits import EXIT_NOT_CHECKED
from dspark_lab.results.record import verify_record as VR
from dspark_lab.results.record.output import OutputError
from dspark_lab.results.record.paths import default_data_dir


def cmd_verify(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dspark_lab import verify

    rec = verify.run(args.only, progress=lambda s: print(s, file=sys.stderr, flush=True))
    checks = VR.checks_of(rec)
    n = VR.counts(rec)
    if args.json:
        print(json.dumps(rec, indent=1))
    else:
        print("\n".join(c.line() for c in checks))
    if n["checked"] == 0:
        err("nothing could be checked here (no CUDA device): nothing saved")
        return EXIT_NOT_CHECKED
    if not args.no_save:
        path = args.out or default_data_dir() / "machines" / VR.file_name(rec)
        try:
            print(f"saved {VR.save(rec, path)}", file=sys.stderr)
        except (OutputError, OSError) as e:
            err(f"cannot write the verify record: {e}")
            return EXIT_CANNOT_WRITE
    rec_line = VR.summary_line(rec)
    print(rec_line + f" in {rec['wall_s']:.0f} s")
    return EXIT_OK if n["failed"] == 0 else EXIT_FAILED
