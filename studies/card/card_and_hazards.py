"""GPU stage for the platform card and the hazards: measure this GPU's card and its hazard
counts, compare the card with the one just recorded (`dspark-lab doctor --card --compare`), run
notebook 02's card section and notebook 04's hazards section live, run the CUDA tests, and print a
summary table last. Bounded to about 110 s of wall time; each later step is skipped, and says so,
when too little time is left.

    OUT=/some/folder python -m studies.card.card_and_hazards

Writes under $OUT/card/ laid out as the repository (commit data/ as it is):
    data/machines/<gpu>-card-<date>.json      the card, with the fingerprint
    data/machines/<gpu>-hazards-<date>.json   the hazard counts, with the fingerprint
    evidence/...                              doctor's output, the executed sections, pytest's output,
                                              the report's card section (evidence for the note, not data)
and the same tree as $OUT/card.tar.gz (extract it at the repository root; evidence/ is not for commit).
Without CUDA it writes the fingerprint, says that nothing can be measured, and exits 2.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

T0 = time.perf_counter()
BUDGET_S = 108.0
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def elapsed() -> float:
    return time.perf_counter() - T0


def left() -> float:
    return BUDGET_S - elapsed()


def say(msg: str) -> None:
    print(f"[{elapsed():6.1f} s] {msg}", flush=True)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def run_doctor_compare(card_path: Path, evidence: Path, summary: dict) -> None:
    """`dspark-lab doctor --card --compare <the card just recorded>`, in this process; its stdout kept."""
    from dspark_lab.cli.main import main as cli_main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli_main(["doctor", "--card", "--compare", str(card_path)])
    text = buf.getvalue()
    write(evidence / "doctor-card-compare.txt", f"$ dspark-lab doctor --card --compare {card_path.name}\n{text}")
    print(text, flush=True)
    line = next((ln for ln in text.splitlines() if "with a different verdict" in ln), "")
    summary["doctor --card --compare (rc)"] = f"{rc}: {line.strip()}"


def run_sections_live(data_dir: Path, evidence: Path, summary: dict, timeout_s: float) -> None:
    """Notebook 02's card cells and notebook 04's hazards cells, executed live in one kernel, with
    `data_dir` (this run's records) as the recorded data."""
    import nbclient
    import nbformat

    cells = []
    for name, tag in (("02_tuning_new_gpu.ipynb", "platform-card"), ("04_sync_gallery.ipynb", "hazards")):
        nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
        cells += [c for c in nb.cells if tag in c.metadata.get("tags", [])]
    nb = nbformat.v4.new_notebook(cells=cells)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.pop("DSPARK_LAB_MODE", None)
    env["DSPARK_DATA"] = str(data_dir)  # the card just recorded is the "recorded" one the live card is set beside
    # nbclient's timeout is per cell: the card cell is the long one, the others take a second or two
    client = nbclient.NotebookClient(nb, timeout=max(10, int(timeout_s) - 2 * len(cells)), kernel_name="python3",
                                     resources={"metadata": {"path": str(ROOT / "notebooks")}})
    try:
        client.execute(env=env)
        status = "ok"
    except Exception as e:  # noqa: BLE001 - recorded, the script goes on
        status = f"FAILED: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    nbformat.write(nb, evidence / "notebook-sections-live.ipynb")
    figs = [o["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"] for c in nb.cells
            for o in c.get("outputs", []) if "application/vnd.plotly.v1+json" in o.get("data", {})]
    printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "stream")
    write(evidence / "notebook-sections-live.txt", printed + "\nfigures:\n" + "\n".join(figs))
    summary["notebook 02 card + 04 hazards, live"] = (
        f"{status}; figures: {len(figs)}; measured live: {'card measured now' in printed}")


def run_cuda_tests(evidence: Path, summary: dict, timeout_s: float) -> None:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_card_cuda.py", "tests/test_hazards.py"]
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        text, rc = p.stdout + p.stderr, p.returncode
    except subprocess.TimeoutExpired:
        text, rc = f"timed out after {timeout_s:.0f} s", "timeout"
    write(evidence / "pytest-cuda.txt", " ".join(cmd) + "\n" + text)
    summary["CUDA tests (rc)"] = f"{rc}: {text.strip().splitlines()[-1] if text.strip() else ''}"


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    out = Path(os.environ.get("OUT", "out/gpu")) / "card"
    machines, evidence = out / "data" / "machines", out / "evidence"
    evidence.mkdir(parents=True, exist_ok=True)
    import torch

    from dspark_lab.measure import probe
    from dspark_lab.results.analyses import card as card_results
    from dspark_lab.results.analyses import hazards as hazards_results
    from dspark_lab.results.record.paths import machine_file_name

    fp = probe.fingerprint()  # recorded in the card and the hazards record
    say(f"fingerprint: {fp['gpu']} · driver {fp['driver']} · CUDA {fp['cuda']} · torch {fp['torch']}")
    if not torch.cuda.is_available():
        write(evidence / "fingerprint.json", json.dumps(fp, indent=1))
        say("no CUDA device: the card and the hazards need one; nothing measured (fingerprint written)")
        return 2
    summary: dict = {"machine": f"{fp['gpu']} · driver {fp['driver']} · CUDA {fp['cuda']} · torch {fp['torch']}"}

    from dspark_lab.measure import card as card_measure
    from dspark_lab.measure import hazards as hazards_measure

    say("card: measuring (9 sizes x 15 sources x 2 queue depths, 5 repeats)")
    card = card_measure.measure_card(progress=say)
    card_path = card_results.save(card, machines / card_results.file_name(card))
    f = card_results.frame(card)
    say(f"card: {len(f)} cells in {card['wall_s']} s -> {card_path}")
    bad = f[f["error"] != ""]
    summary["card cells (failed)"] = f"{len(f)} ({len(bad)})"
    summary["H2D pageable non_blocking"] = card_results.threshold_in_words(card_results.wait_threshold(f))
    summary["D2H into pageable, non_blocking"] = card_results.threshold_in_words(
        card_results.wait_threshold(f, "d2h", "into_pageable_nb"))
    for s, v in card_results.strategy_verdicts(card).items():
        summary[f"4 B cell of {s}"] = v

    if card.get("trace_error"):
        summary["card trace pass"] = f"FAILED (timings kept): {card['trace_error']}"
    say("hazards: every form and strategy, 200 steps, 0.2 ms queued per step")
    try:
        hz = hazards_measure.measure_hazards(n=200, queued_ms=0.2)
    except Exception as e:  # noqa: BLE001 - the card is saved; the rest goes on
        traceback.print_exc()
        hz, summary["hazards"] = None, f"FAILED: {type(e).__name__}: {e}"
    if hz is not None:
        hz_path = hazards_results.save(hz, machines / machine_file_name(hz["fingerprint"], hz["recorded"], "hazards"))
        say(f"hazards -> {hz_path}")
        for c in hz["forms"]:
            summary[f"hazard {c['form']}"] = f"{c['wrong']} wrong of {c['n']}"
        summary["strategies under run-ahead"] = ", ".join(f"{s['strategy']} {s['wrong']}/{s['n']}" for s in hz["strategies"])
        for s in hazards_results.surprises(hz):
            say(f"UNEXPECTED: {s}")

    from dspark_lab.views import figures
    from dspark_lab.views.card_report import card_sections

    first = [True]

    def fig_html(fig) -> str:
        html = fig.to_html(full_html=False, include_plotlyjs=first[0], config=figures.PLOTLY_CONFIG)
        first[0] = False
        return html

    write(evidence / "report-card-section.html", "<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>"
          + "\n".join(card_sections(fig_html, [card], [hz] if hz else [])) + "</body></html>")
    say("report's card section written")

    steps = [("doctor --card --compare", 30, lambda: run_doctor_compare(card_path, evidence, summary)),
             ("notebook sections, live", 35, lambda: run_sections_live(out / "data", evidence, summary, left() - 5)),
             ("CUDA tests", 15, lambda: run_cuda_tests(evidence, summary, left() - 2))]
    for name, needs_s, step in steps:
        if left() < needs_s:
            summary[name] = f"SKIPPED: {left():.0f} s left, needs about {needs_s} s (run it alone)"
            say(summary[name])
            continue
        say(f"{name}: start")
        try:
            step()
        except Exception as e:  # noqa: BLE001 - each step's failure is reported, the others still run
            traceback.print_exc()
            summary[name] = f"FAILED: {type(e).__name__}: {e}"
        say(f"{name}: done")

    # The device tool brings back files at most two folders below $OUT: data/machines/ travels in this.
    with tarfile.open(out.parent / "card.tar.gz", "w:gz") as tar:
        tar.add(out, arcname=".")
    summary["everything, as one file"] = f"{out.parent / 'card.tar.gz'} (tar -xzf it at the repository root; commit data/, not evidence/)"
    summary["wall time"] = f"{elapsed():.1f} s"
    width = max(len(k) for k in summary)
    print("\nsummary (card and hazards)\n" + "-" * 26)
    for k, v in summary.items():
        print(f"{k:<{width}}  {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
