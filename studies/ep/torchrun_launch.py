"""GPU stage: the EP measurement launched by torchrun (one node, one process, NCCL) on
one H200, its run file under $OUT/torchrun/data/runs/ (commit it to data/runs/).

  python -m studies.ep.torchrun_launch             # on a CUDA machine (< 45 s)
  python -m studies.ep.torchrun_launch --dry-run   # without CUDA: the same launch with gloo and tiny sizes

It runs `python -m torch.distributed.run --nnodes=1 --nproc-per-node=1 --rdzv-backend=c10d
--rdzv-endpoint=127.0.0.1:PORT -m dspark_lab.cli ep --launcher torchrun --backend nccl ...`,
bounded by a wall-clock limit, then reads the run file back through the loader and prints its
fingerprint (written by rank 0 with measure.probe.fingerprint) and a summary table last.
At world size 1 the MoE keeps every expert local, so one dispatch mode is measured (the rows say
dispatch "" and ep_mode "single": no collective runs in the step; the process group, NCCL
included, is joined and used for the ranks' barriers and the gather of rows).
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

LAUNCH_LIMIT_S = 38.0  # the torchrun job; the whole script stays under 45 s
GPU_ARGS = ["--backend", "nccl", "--model", "small", "--workload", "sglang_profile", "--batch-size", "8", "--gamma", "4",
            "--steps", "20", "--warmup", "3", "--trials", "3", "--profile-steps", "6"]
DRY_ARGS = ["--backend", "gloo", "--model", "tiny", "--workload", "tiny", "--batch-size", "2", "--gamma", "2",
            "--steps", "2", "--warmup", "0", "--trials", "1", "--profile-steps", "2", "--strategies", "non_blocking"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(out: Path, ep_args: list, log: Path, limit_s: float) -> int:
    """The torchrun job in its own session, killed whole past `limit_s`; progress streamed to stdout."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=1", "--rdzv-backend=c10d",
           f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--max-restarts=0", "-m", "dspark_lab.cli", "ep",
           "--launcher", "torchrun", "--dispatch", "allreduce", "--check-reference", "--timeout-s", "30",
           *ep_args, "--out", str(out)]
    print("$ " + " ".join(cmd[1:]), flush=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + limit_s
        while proc.poll() is None:
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                print(f"torchrun job killed after {limit_s:.0f} s", flush=True)
                return 124
            time.sleep(0.5)
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith(("dspark-lab ep", "wrote ", "allreduce")) or line.endswith(" rows"):
            print("  " + line, flush=True)
    return proc.returncode


def summarize(run_file: Path) -> list[str]:
    import numpy as np

    from dspark_lab.results.loading import load as run_load
    from dspark_lab.results.record import store

    header = store.read_header(run_file)
    rows = run_load.load(run_file).rows
    fp = header["fingerprint"]
    lines = [f"machine: {fp.get('gpu')} | driver {fp.get('driver')} | CUDA {fp.get('cuda')} | torch {fp.get('torch')}"
             f" | NCCL {header.get('nccl_version')}",
             f"run {header['run_id']}: launcher {header.get('launcher')}, backend {header.get('backend')}, "
             f"world {header.get('world_size')}, nodes {header.get('nodes')}, ranks {header.get('ranks')}",
             f"reference check: {header.get('reference_check')}",
             f"{'strategy':18s} {'rows':>4s} {'status':>7s} {'median step_ms':>15s} {'node':>10s} {'local_rank':>10s}"]
    for s, g in rows.groupby("strategy", sort=False):
        lines.append(f"{s:18s} {len(g):4d} {','.join(sorted(set(g.status))):>7s} {np.median(g.step_ms):15.3f} "
                     f"{str(g.node.iloc[0]):>10s} {int(g.local_rank.iloc[0]):10d}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="without CUDA: gloo and tiny sizes (nothing to commit)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.dry_run:
        print("CUDA is not available: this script runs on the H200 (use --dry-run to check the launch on CPU)")
        return 2
    out = Path(os.environ.get("OUT", "out/gpu")) / "torchrun"
    runs = out / "data" / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    before = set(runs.glob("*.jsonl"))
    log = out / "torchrun.log"  # beside data/, not to be committed
    print(f"[torchrun] {'GPU' if cuda else 'dry run (CPU, gloo)'}: torchrun, 1 node x 1 process -> {runs}/", flush=True)
    # A folder: rank 0's writer names the file by its run id, as every recorded run is named.
    rc = launch(runs, GPU_ARGS if cuda and not args.dry_run else DRY_ARGS, log, LAUNCH_LIMIT_S)
    made = sorted(set(runs.glob("*.jsonl")) - before)
    run_file = made[-1] if made else None
    if rc != 0 or run_file is None:
        print(f"[torchrun] job failed (exit {rc}); the end of {log}:")
        print(log.read_text(errors="replace")[-4000:])
        return 1
    lines = summarize(run_file)
    print(f"[torchrun] done in {time.monotonic() - t0:.1f} s; commit {run_file.name} to data/runs/"
          + (" (dry run: do not commit)" if not cuda or args.dry_run else ""))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
