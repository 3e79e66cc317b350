"""Notebook 06 (the worked investigation) runs headless in recorded mode, on CPU: on a record made
from synthetic numbers (a fake machine, clearly not GPU data), it says it shows a recording and
from where, reads the costliest line as the one that costs most, shows the paired diff and the
guard, and ends inspect and diff with their verdict lines; without any record it says so and does
not fail; and the committed recording, where there is one, comes from a GPU."""
from __future__ import annotations

from pathlib import Path

import pytest

from dspark_lab.results.record import investigation
from helpers import (COMMITTED_DATA, NOTEBOOKS_DIR, checkout_with_the_notebook_filter, errors, execute_notebook,
                     inspect_record, kernel_env, printed, unstripped_cells, what_git_commits)

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

NB = NOTEBOOKS_DIR / "06_investigation.ipynb"
SLOW = [("gallery/decode_step.py:56 decode_step_slow", 1.0, True, 1.1, 0.95,
         "positions = torch.tensor(s.seq_lens_cpu.tolist(), device=s.device)"),
        ("gallery/decode_step.py:47 _owner_of_rows", 1.0, True, 0.05, 0.21, "return torch.repeat_interleave(tokens, repeats)"),
        ("gallery/decode_step.py:52 _count_accepted", 1.0, True, 0.02, 0.01, "return int(s.accept.sum().item())")]


def synthetic_investigation(fix: str = "device_owner") -> dict:
    """A made-up investigation. `fix`: "device_owner", the fix the notebook teaches (the fixed step
    keeps only `_count_accepted`, and its host waits for the forward at the by-design read-back), or
    "moved_wait", the earlier fix (the wait moved into `_owner_of_rows`)."""
    pair = "synthpair01"
    before = inspect_record("slow_step", SLOW, trials=(3.0, 3.1, 2.9, 3.05, 3.0), pair={"id": pair, "role": "before"})
    kept = SLOW[2:] if fix == "device_owner" else [SLOW[1][:3] + (1.0, 0.6, SLOW[1][5]), SLOW[2]]
    after = inspect_record("fixed_step", kept, trials=(2.0, 2.1, 1.95, 2.02, 2.0), pair={"id": pair, "role": "after"})
    rec = {"kind": investigation.KIND, "schema": investigation.SCHEMA,
           "fingerprint": dict(before["fingerprint"]), "recorded_at": "2026-01-01T10:00:00+00:00",
           "before": before, "after": after,
           "guard": {"allow": ["read_back: why", "_count_accepted: why"], "before": [SLOW[0][0]], "after": [], "note": ""}}
    if fix == "device_owner":
        after["parts"]["host_readback_ms"] = 0.4  # the host reaches the read-back with its work done
        rec["races"] = {"checked": True, "note": "", "steps": 17, "queued_ms": 0.2, "races": [], "clean": True}
        rec["owner_forms"] = {"calls": 9, "rows": 30, "bound": 40, "equal": True, "device": "cuda",
                              "slow_ms_per_call": 0.123, "fixed_ms_per_call": 0.0456}
    return investigation.validate(rec)


def _run(tmp_path, **env) -> str:
    nb = execute_notebook(nbformat.read(NB, as_version=4), kernel_env(tmp_path / "data", tmp_path / "out", **env))
    assert errors(nb.cells) == []
    return printed(nb.cells), nb


def assert_committed_stripped_with_its_kernel(path: Path) -> None:
    """What git would commit of the notebook (not the working-tree file, which JupyterLab's autosave
    fills with outputs) holds no outputs and names ipykernel's kernel."""
    committed = what_git_commits(path)
    assert nbformat.reads(committed, as_version=4).metadata["kernelspec"]["display_name"] == "Python 3 (ipykernel)"
    assert unstripped_cells(committed) == [], f"{path.name}: git would commit its outputs"


def test_notebook06_is_committed_stripped_with_its_kernel():
    assert_committed_stripped_with_its_kernel(NB)


def test_notebook06_used_in_jupyterlab_is_judged_by_what_git_would_commit(tmp_path):
    """Notebook 06 autosaved after a run (an output, a count, the kernel's language_info) in a checkout
    with the notebook filter: the working-tree file holds the output, the check passes all the same."""
    nb = nbformat.read(NB, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code")
    cell.execution_count = 1
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="RECORDED: measured on SYNTH-GPU\n")]
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7"}
    saved = checkout_with_the_notebook_filter(tmp_path) / "notebooks" / NB.name
    nbformat.write(nb, saved)
    assert unstripped_cells(saved.read_text()), "the saved copy holds an output, as autosave leaves it"
    assert_committed_stripped_with_its_kernel(saved)


def test_on_a_synthetic_recording_the_notebook_says_what_it_shows_and_reads_it(tmp_path):
    path = investigation.save(synthetic_investigation(), tmp_path / "synth-decode-step.json")
    text, nb = _run(tmp_path, DSPARK_INVESTIGATION_DATA=str(path))
    assert f"RECORDED: measured on SYNTH-GPU" in text and str(path) in text
    assert "verdict: gallery/decode_step.py:56 decode_step_slow costs most" in text
    assert "costs most: gallery/decode_step.py:56" in text.replace("          ", "")
    assert "costs nothing here: gallery/decode_step.py:52 _count_accepted" in text.replace("  ", "")
    assert "the sync is inside a library call" in text  # repeat_interleave names no sync
    assert "verdict: AFTER is" in text and "faster" in text and "next: guard the fixed step in CI" in text
    assert "before (slow_step): FAILS on gallery/decode_step.py:56" in text and "after (fixed_step): passes" in text
    [held] = [ln for ln in text.splitlines() if ln.startswith("recorded fixed step (")]
    assert held.endswith("syncs in: _count_accepted")  # which fix the recording holds
    assert "waits: the wait went: host wait 1.170 → 0.020 ms/step" in text  # diff's verdict, from the record
    assert "rows whose wait grew: the by-design read-back (not a sync site) (+0.400 ms)" in text
    assert "races: none in 17 steps" in text  # the recording's own race check of its fix
    assert "9 calls back to back" in text and "0.1230 ms per call (30 rows" in text and "0.0456 ms per call (40 rows)" in text
    md = [o["data"]["text/markdown"] for c in nb.cells for o in c.get("outputs", []) if "text/markdown" in o.get("data", {})]
    assert md and "paired per round" in md[0]
    figs = [o for c in nb.cells for o in c.get("outputs", []) if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figs) == 2  # the timeline and the before/after breakdown


def test_on_a_recording_of_the_earlier_fix_it_says_the_wait_moved_and_where_to(tmp_path):
    path = investigation.save(synthetic_investigation("moved_wait"), tmp_path / "synth-decode-step.json")
    text, _ = _run(tmp_path, DSPARK_INVESTIGATION_DATA=str(path))
    [held] = [ln for ln in text.splitlines() if ln.startswith("recorded fixed step (")]
    assert held.endswith("syncs in: _count_accepted, _owner_of_rows")
    assert "waits: the wait moved rather than went" in text
    assert "rows whose wait grew: gallery/decode_step.py:47 _owner_of_rows (+0.950 ms)" in text
    assert "owner forms: not in this record" in text


def test_without_a_recording_it_says_so_and_runs_through(tmp_path):
    (tmp_path / "data").mkdir()
    text, _ = _run(tmp_path)
    assert investigation.NO_RECORD in text


def test_the_committed_recording_comes_from_a_gpu():
    found = investigation.find(COMMITTED_DATA)
    if found is None:
        pytest.skip("no committed investigation under data/investigation/ yet (studies/field/record_field.py on a GPU)")
    rec = investigation.load(found)
    assert rec["before"]["device"] == rec["after"]["device"] == "cuda"
    assert rec["before"]["pair"]["id"] == rec["after"]["pair"]["id"]


def test_the_fix_it_teaches_removes_the_wait_and_every_allowed_sync_carries_a_reason():
    nb = nbformat.read(NB, as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    assert "is being added" not in text  # dspark-lab lint exists
    assert "torch.searchsorted" in text and "the wait moved, it was not removed" in text
    allows = [a.split("'")[1] for a in text.split("--allow ")[1:]]
    assert allows and all(": " in a for a in allows) and not any(a.startswith("_owner_of_rows") for a in allows)
