"""Shared by the test files: the synthetic recorded set (made-up numbers, clearly not GPU data: two
runs on two fake machines, every strategy, a timeline per point) as DataFrames or as run files in the
store's format; the committed runs' folder; notebooks executed headless and read as git would commit
them; and a child process's start as a terminal gives it. Fixtures are in conftest.py."""
from __future__ import annotations

import functools
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dspark_lab import strategies
from dspark_lab.measure import trace
from dspark_lab.measure.ranges import STEP_RANGE
from dspark_lab.results import Runs
from dspark_lab.results.record import schema
from dspark_lab.results.record import store
from dspark_lab.results.query.runs import ok_rows

ROOT = Path(__file__).resolve().parents[1]
RUNS_DIR = ROOT / "data" / "runs"  # the committed runs


def synthetic_runs(runs=(("run-a", "SYNTH-GPU-A", "1.0"), ("run-b", "SYNTH-GPU-B", "2.0")),
                   eps=(1, 2), batches=(1, 8, 32), gammas=(2, 4), trials=3, seed=0):
    """(rows, timelines, headers): two DataFrames and a header dict per run, as recorded runs load; values made up."""
    rng = np.random.default_rng(seed)
    rows, segs, headers = [], [], []
    for ri, (run_id, gpu, driver) in enumerate(runs):
        headers.append({"run_id": run_id, "gpu": gpu, "driver": driver, "cuda": "12.0", "torch": "2.0-synth",
                        "recorded_at": f"2026-01-0{ri + 1}T10:00:00+00:00"})
        for ep in eps:
            for bs in batches:
                for g in gammas:
                    pid = f"p{ep}-{bs}-{g}"
                    for si, s in enumerate(strategies.names()):
                        dd = s == "device_direct"
                        base = 6.0 + 0.01 * bs + 0.05 * g + ri * 0.5
                        stream = 1.0 if dd else 0.0
                        host = dict(host_prep_ms=3.0, host_blocked_ms=3.5 if dd else 0.0, host_readback_ms=0.2,
                                    host_copy_ms=0.02 * (s != "persistent_fill"), host_launch_ms=0.3,
                                    host_other_ms=0.1 + si * 0.01)
                        prof = sum(host.values())
                        busy = 0.7 * prof + 0.001 * bs
                        for t in range(trials):
                            step = base + (2.3 if dd else 0.0) + rng.normal(0, 0.05)
                            rows.append({
                                "point_id": pid, "ep_size": ep, "batch_size": bs, "gamma": g, "strategy": s,
                                "model": "small", "workload": "sglang_profile", "graph": True, "device": "cuda",
                                "query_token_num": g, "bucket_batch_size": bs, "num_tokens": bs * g,
                                "target_verify_ms": 4.5, "predicate": ep > 1, "status": "ok", "error": "",
                                "trial": t, "steps": 60, "step_ms": step, "step_ms_p50": step, "step_ms_p90": step * 1.1,
                                "profiled_step_ms": prof, "syncs_per_step": stream, "stream_syncs_per_step": stream,
                                "device_syncs_per_step": 0.0, "event_syncs_per_step": 0.0, "sync_memcpy_per_step": 0.0,
                                "readback_syncs_per_step": 1.0, "h2d_pageable_per_step": 1.0 if s in ("device_direct", "non_blocking") else 0.0,
                                "h2d_pinned_per_step": 0.0, "allocs_per_step": 1.0, **host,
                                "gpu_busy_ms": busy, "gpu_idle_ms": prof - busy, "gpu_idle_after_sync_ms": 1.2 if dd else 0.0,
                                "sync_site": "dspark_lab/strategies.py:25 device_direct" if dd else "",
                                **{k: headers[-1][k] for k in schema.FINGERPRINT_COLUMNS},
                            })
                        for k in range(3):
                            t0 = k * prof
                            segs += [
                                [run_id, pid, s, "host", "step", t0, t0 + prof, f"step {k + 1}"],
                                [run_id, pid, s, "host", "prep", t0, t0 + 3.0, "prep"],
                                [run_id, pid, s, "gpu", "kernel", t0 + 0.5, t0 + 5.5, "target_verify"],
                                [run_id, pid, s, "gpu", "kernel", t0 + 5.5005, t0 + 5.8, "draft"],
                            ]
                            if dd:
                                segs += [[run_id, pid, s, "host", "blocked", t0 + 3.0, t0 + 6.5, "blocked"],
                                         [run_id, pid, s, "host", "sync", t0 + 3.0, t0 + 6.5,
                                          "cudaStreamSynchronize at dspark_lab/strategies.py(26): device_direct"]]
    tl = pd.DataFrame(segs, columns=["run_id", "point_id", "strategy", "lane", "part", "start_ms", "end_ms", "label"])
    return pd.DataFrame(rows), tl, headers


def write_synthetic_runs(folder) -> Path:
    """Write the synthetic set as run files (store format) under folder/runs; returns folder."""
    rows, tl, headers = synthetic_runs()
    folder = Path(folder)
    for h in headers:
        fp = {k: h[k] for k in ("gpu", "driver", "cuda", "torch")}
        with store.RunWriter.create(folder / "runs", fingerprint=fp, sweep={}, run_kind="sweep", run_id=h["run_id"]) as w:
            r = rows[rows.run_id == h["run_id"]]
            t = tl[tl.run_id == h["run_id"]]
            for pid, g in r.groupby("point_id", sort=False):
                recs = g.drop(columns=list(schema.FINGERPRINT_COLUMNS)).to_dict("records")
                tls = [{"kind": "timeline", "point_id": pid, "strategy": s,
                        "segments": gg[["lane", "part", "start_ms", "end_ms", "label"]].values.tolist()}
                       for s, gg in t[t.point_id == pid].groupby("strategy", sort=False)]
                w.write_point(pid, recs, tls)
    return folder


def a_point(rows, one_run=True):
    """A recorded point that has every strategy ok (first such one), from one run."""
    ok = ok_rows(rows)
    if one_run and "run_id" in ok:
        ok = ok[ok["run_id"] == ok["run_id"].iloc[0]]
    n = ok.groupby("point_id")["strategy"].nunique()
    pid = n.idxmax()
    return ok[ok["point_id"] == pid]


# -- notebooks, executed headless ---------------------------------------------------------------

NOTEBOOKS_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("[0-9][0-9]_*.ipynb"))
COMMITTED_DATA = ROOT / "data"  # the notebooks' fixed input: the committed runs


def kernel_env(data_dir: Path, out_dir: Path, **extra: str) -> dict:
    """A kernel's environment: this process's, in recorded mode on `data_dir`, exports to `out_dir`,
    the package importable from this checkout (this process's os.environ is left as it is)."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "DSPARK_LAB_MODE": "recorded", "DSPARK_DATA": str(data_dir), "DSPARK_OUT": str(out_dir),
            "PYTHONPATH": path, **extra}




def _client(nb, sockets: Path):
    """A client that runs the notebook's cells in a fresh kernel, in notebooks/ as Jupyter would. The
    kernel talks over Unix sockets in a folder of its own, not TCP ports: a client picks free ports
    and the kernel binds them later, so two kernels started at once (the suite's two workers) could
    take the same port and a client then waits on another kernel until its timeout."""
    import nbclient  # the dev extra: test files that call this importorskip it first
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name="python3", transport="ipc", ip=str(sockets / "k"))
    return nbclient.NotebookClient(nb, km=km, timeout=600, kernel_name="python3",
                                   resources={"metadata": {"path": str(NOTEBOOKS_DIR)}})


def execute_notebook(nb, env: dict):
    """Run the notebook's cells in a fresh kernel started with `env`; the outputs land in `nb`, which
    is returned. Raises CellExecutionError naming a failing cell."""
    with tempfile.TemporaryDirectory(prefix="dspark-kernel-") as sockets:
        client = _client(nb, Path(sockets))
        km = client.km  # nbclient drops it (None) when the kernel fails to start
        try:
            client.execute(env=env)
        finally:  # a client given its kernel manager leaves the kernel running: it would idle until pytest exits
            if client.kc is not None:
                client.kc.stop_channels()
            if km.has_kernel:
                km.shutdown_kernel(now=True)
    return nb


def execute_notebooks(paths, env: dict) -> dict:
    """Each notebook read and executed as execute_notebook does, one after another: name -> (notebook,
    seconds its run took). One at a time: kernels started together race for their ports (each client
    picks free ports, then the kernel binds them), and two clients run at once in the full suite hung
    with both kernels idle, in one event loop and in two processes alike. The first CellExecutionError
    is raised."""
    import nbformat  # the dev extra: test files that call this importorskip it first

    out = {}
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        t0 = time.perf_counter()
        execute_notebook(nb, env)
        out[path.name] = (nb, time.perf_counter() - t0)
    return out


STRIP = ["-m", "nbstripout", "--keep-id", "--extra-keys", "metadata.language_info"]  # scripts/ensure_env.sh's filter


def what_git_commits(path: Path) -> str:
    """The notebook as `git add` would store it: the file through the clean filter that .gitattributes
    names for it, as git runs it (a shell command, the file on stdin, in the checkout's root), or the
    file itself where this is no git checkout or no configured filter applies. A notebook used in
    JupyterLab (outputs autosaved) is judged by what it would commit, not by the working-tree file."""
    def git(*args):
        return subprocess.run(["git", "-C", str(path.parent), *args], capture_output=True, text=True)

    attr = git("check-attr", "filter", "--", path.name)
    name = attr.stdout.rsplit(": ", 1)[-1].strip() if attr.returncode == 0 else ""
    clean = git("config", "--get", f"filter.{name}.clean") if name not in ("", "unspecified", "unset", "set") else None
    if clean is None or clean.returncode != 0:
        return path.read_text()
    root = git("rev-parse", "--show-toplevel").stdout.strip()
    return _cleaned(clean.stdout.strip(), root, path.read_bytes(), path.name)


@functools.lru_cache(maxsize=64)
def _cleaned(command: str, root: str, content: bytes, name: str) -> str:
    """The clean filter's output for these bytes: the same bytes, filter and checkout give the same
    text, so each notebook goes through the filter (a Python process) once per session."""
    done = subprocess.run(command, shell=True, input=content, cwd=root, capture_output=True)
    assert done.returncode == 0, f"{name}: the clean filter failed: {done.stderr[-2000:].decode(errors='replace')}"
    return done.stdout.decode()


def unstripped_cells(text: str) -> list[int]:
    """Indices of the code cells that hold outputs or an execution count."""
    import nbformat  # the dev extra: test files that call this importorskip it first

    nb = nbformat.reads(text, as_version=4)
    return [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and (c.outputs or c.execution_count is not None)]


def checkout_with_the_notebook_filter(folder: Path) -> Path:
    """A git checkout in `folder` with this repository's .gitattributes and the notebook filter
    configured as scripts/ensure_env.sh configures it (and its .gitignore), and an empty notebooks/ to save into."""
    def git(*args):
        subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)

    git("init", "-q")
    git("config", "filter.nbstripout.clean", " ".join(shlex.quote(a) for a in [sys.executable, *STRIP]))
    (folder / "notebooks").mkdir()
    (folder / ".gitattributes").write_text((ROOT / ".gitattributes").read_text())
    (folder / ".gitignore").write_text((ROOT / ".gitignore").read_text())
    return folder


def outputs(cells, kind: str) -> list:
    """The cells' outputs of one output_type ("stream", "error", "display_data", ...)."""
    return [o for c in cells for o in c.get("outputs", []) if o.get("output_type") == kind]


def printed(cells) -> str:
    """What the cells printed (stdout and stderr), in order."""
    return "".join(o.get("text", "") for o in outputs(cells, "stream"))


def errors(cells) -> list[str]:
    return [f"{o.get('ename')}: {o.get('evalue')}" for o in outputs(cells, "error")]


# -- notebook 01's section "One rank's sync costs every rank" ------------------------------------

EP_SECTION = "## One rank's sync costs every rank"


def section(nb, heading: str) -> list:
    """A notebook section's code cells: from the markdown cell starting with `heading` to the next
    level-2 heading."""
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown" and c.source.startswith(heading))
    end = next((i for i in range(start + 1, len(nb.cells))
                if nb.cells[i].cell_type == "markdown" and nb.cells[i].source.startswith("## ")), len(nb.cells))
    return [c for c in nb.cells[start:end] if c.cell_type == "code"]


def ep_section(nb) -> list:
    """Notebook 01's EP section's code cells."""
    return section(nb, EP_SECTION)


def figure_titles(cells) -> list[str]:
    out = []
    for c in cells:
        for o in c.get("outputs", []):
            fig = o.get("data", {}).get("application/vnd.plotly.v1+json")
            if fig:
                t = fig["layout"]["title"]
                out.append(t["text"] if isinstance(t, dict) else t)
    return out


def _share_tables(cells) -> list[str]:
    return [o["data"]["text/html"] for c in cells for o in c.get("outputs", []) if "text/html" in o.get("data", {})]


def assert_ep_section_drawn(cells, data: Path, run_id: str, dispatch: str) -> str:
    """Notebook 01's EP section drew its two figures and its share table for `run_id`; returns what it printed."""
    titles = figure_titles(cells)
    assert any(t.startswith("One rank's sync costs every rank") for t in titles), titles
    assert any(t.startswith("Who waits for whom") for t in titles), titles
    text = printed(cells)
    # the EP recording is named by its first file's label, with the dispatch drawn first (results.viewmodels.picks.real_ep)
    assert f"the EP recording that starts with {Runs.load(data).labels()[run_id]} " in text, text
    assert f"drawn first: {dispatch}" in text
    assert f"{dispatch}, 2 ranks:" in text  # the share table read out, from the run's numbers
    assert "no real-EP run recorded" not in text
    tables = _share_tables(cells)
    assert tables and "only rank 0 device_direct" in tables[0]
    return text


def synthetic_card(gpu="SYNTH-GPU-A", driver="1.0", waits_from=4 << 20, queued_ms=10.0, reps=3,
                   recorded="2026-01-01T10:00:00+00:00") -> dict:
    """A platform card in results.analyses.card's format with made-up times (clearly not GPU data): the copy runs
    at 20 KB/µs; the blocking forms wait for the queue at every size, a pageable non-blocking H2D
    copy (and the pinned non-contiguous one, staged through pageable memory) from `waits_from` bytes up,
    every other form returns in 8 µs."""
    from dspark_lab.results.analyses import card

    always = {"pageable_copy", "pinned_copy", "tensor_device", "into_pageable_nb", "cpu", "readback"}
    from_size = {"pageable_to_nb", "pinned_strided_to_nb"}
    cells = []
    for source, (direction, _, cap) in card.SOURCES.items():
        for size in card.SIZES:
            if cap is not None and size > cap:
                continue
            copy_us = size / 2e4 + 2
            for q in (0.0, queued_ms):
                blocks = source in always or (source in from_size and size >= waits_from)
                host = (q * 1e3 + copy_us + 10) if blocks else 8.0
                cells.append(dict(direction=direction, source=source, size_bytes=size, queued_ms=q,
                                  host_us=[host * (1 + 0.01 * k) for k in range(reps)], copy_gpu_us=copy_us,
                                  debug_syncs=int(blocks), trace_syncs=int(blocks), gpu_copies=[]))
    return {"kind": card.CARD_KIND, "schema": card.CARD_SCHEMA, "recorded": recorded, "queued_ms": [0.0, queued_ms],
            "reps": reps, "fingerprint": {"gpu": gpu, "driver": driver, "cuda": "12.0", "torch": "2.0-synth"},
            "cells": cells}


# -- inspect records (dspark-lab inspect), made up: a fake machine, clearly not GPU data -------------

SYNTH_FINGERPRINT = {"gpu": "SYNTH-GPU", "driver": "0.0", "cuda": "0.0", "torch": "2.0-synth"}


def inspect_record(label: str, sites=(), *, trials=(2.0, 2.1, 1.9, 2.0, 2.05), pair=None, syncs=None,
                   blocked=None, idle=None, device="cuda") -> dict:
    """A record in results.record.inspect_record's format. `sites`: (site, per_step, exact, blocked_ms, idle_ms, code)."""
    syncs = sum(s[1] for s in sites) if syncs is None else syncs
    blocked = sum(s[3] for s in sites) if blocked is None else blocked
    idle = sum(s[4] for s in sites) if idle is None else idle
    parts = {"host_prep_ms": 0.2, "host_blocked_ms": blocked, "host_readback_ms": 0.0, "host_copy_ms": 0.0,
             "host_launch_ms": 0.3, "host_other_ms": 1.0, "gpu_busy_ms": 1.0, "gpu_idle_ms": 0.5 + idle,
             "gpu_idle_after_sync_ms": idle, "gpu_idle_sync_caused_ms": idle, "profiled_step_ms": 1.5 + blocked}
    counts = {"stream_syncs_per_step": syncs, "device_syncs_per_step": 0.0, "event_syncs_per_step": 0.0,
              "sync_memcpy_per_step": 0.0, "syncs_per_step": syncs, "readback_syncs_per_step": 0.0,
              "debug_syncs_per_step": syncs, "blocking_copies_per_step": 0.0, "d2h_per_step": syncs,
              "d2h_pageable_per_step": syncs, "h2d_pageable_per_step": 0.0, "h2d_pinned_per_step": 0.0,
              "allocs_per_step": 0.0, "steps_in_trace": 10, "sync_count_mismatch": False, "sync_note": ""}
    timeline = [["host", "other", 0.0, 1.0, "other"], ["gpu", "busy", 0.0, 0.8, "3 GPU ops"],
                ["host", "step", 0.0, 1.5, "step 1"]]
    return {"kind": "dspark_inspect", "schema": 1, "target": f"synth.py:{label}", "label": label,
            "recorded_at": "2026-01-01T10:00:00+00:00", "device": device, "fingerprint": dict(SYNTH_FINGERPRINT),
            "options": {"steps": 20, "trials": len(trials), "warmup": 3, "profiled_steps": 10},
            "counts": counts, "parts": parts, "trials": list(trials), "step_ms": float(np.median(trials)),
            "step_ms_lo": min(trials), "step_ms_hi": max(trials),
            "sites": [dict(zip(("site", "per_step", "exact", "host_blocked_ms", "gpu_idle_ms", "code"), s)) for s in sites],
            "cost_scope": "function", "timeline": timeline, "guard": {"checked": [], "allow": [], "violations": [],
                                                                     "allowed": [], "note": "synthetic"},
            "pair": pair}


def synthetic_hazards(gpu="NVIDIA H200", driver="1", wrong=None, strategies=None, n=200,
                      recorded="2026-01-01T10:00:00+00:00") -> dict:
    """A hazards record (results.analyses.hazards' format) with made-up counts, clearly not GPU data:
    every strategy of `strategies` (default: the table's) 0 wrong of n unless `wrong` says otherwise."""
    from dspark_lab.results.analyses import hazards
    from dspark_lab.results.facts import strategy_table

    wrong = wrong or {}
    names = strategies if strategies is not None else strategy_table.names()
    return {"kind": hazards.HAZARDS_KIND, "schema": hazards.HAZARDS_SCHEMA, "recorded": recorded,
            "fingerprint": {"gpu": gpu, "driver": driver, "cuda": "12.0", "torch": "2.0-synth"},
            "steps": n, "queued_ms_per_step": 0.2,
            "forms": [{"form": "graph_device_buffer", "wrong": 0, "n": n}, {"form": "graph_python_value", "wrong": n, "n": n}],
            "strategies": [{"strategy": s, "wrong": int(wrong.get(s, 0)), "n": n} for s in names]}


class Trace:
    """A minimal Chrome trace: host thread (step ranges, API calls) and one GPU stream."""

    def __init__(self):
        self.events, self.corr = [], 0

    def host(self, name, ts, end, cat="cuda_runtime", **args):
        self.events.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": end - ts, "pid": 1, "tid": 1, "args": args})

    def step(self, ts, end):
        self.host(STEP_RANGE, ts, end, cat="user_annotation")

    def launch(self, ts, end, gpu_ts, gpu_end, api="cudaLaunchKernel"):
        self.corr += 1
        self.host(api, ts, end, correlation=self.corr)
        self.events.append({"ph": "X", "cat": "kernel", "name": f"k{self.corr}", "ts": gpu_ts, "dur": gpu_end - gpu_ts,
                            "pid": 0, "tid": 7, "args": {"correlation": self.corr}})

    def sync(self, ts, end, name="cudaStreamSynchronize"):
        self.corr += 1
        self.host(name, ts, end, correlation=self.corr)

    def ev(self):
        return trace.events({"traceEvents": self.events})


# -- child processes --------------------------------------------------------------------------------

def default_sigint() -> None:
    """A preexec function: the child starts with SIGINT at its default, as a terminal's foreground
    command does, whatever this process inherited (a job started in the background by a shell
    without job control ignores SIGINT, and its children inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class FakeStream:
    """A queue run later: what is enqueued (a 'copy') runs when the fake GPU drains it, as a queued copy does."""

    def __init__(self):
        self.q = []

    def enqueue(self, f):
        self.q.append(f)

    def drain(self):
        while self.q:
            self.q.pop(0)()


def stream_hooks(stream: FakeStream):
    """The race check's hooks on a FakeStream: outputs taken in stream order (as a device copy), read after the drain."""
    from dspark_lab.measure import races

    def snap(v):
        cell = {}
        stream.enqueue(lambda: cell.__setitem__("v", v.clone() if hasattr(v, "clone") else v))
        return cell
    return races.Hooks(ahead=lambda: None, sync=stream.drain, snapshot=snap, resolve=lambda c: c["v"])
