"""`dspark-lab inspect --headroom --races` end to end in its worker on a file target (on CPU: no device read to
serve, nothing that can race: both say so), and a factory target loaded fresh."""
from __future__ import annotations

import json

import torch

from dspark_lab.cli import main as cli
from dspark_lab.run import target as T

STEPS = '''
import torch
x = torch.arange(8.0)
def step():
    return x.sum().item()
def make():
    return step
'''


def test_headroom_and_races_from_the_command_line(tmp_path, capsys):
    f = tmp_path / "steps.py"
    f.write_text(STEPS)
    out = tmp_path / "o"
    rc = cli.main(["inspect", f"{f}:make()", "--headroom", "--races", "--race-steps", "2", "--steps", "2",
                   "--trials", "2", "--warmup", "0", "--out", str(out), "--name", "n"])
    text = capsys.readouterr().out
    rec = json.loads((out / "n-headroom.json").read_text())
    assert rec["kind"] == "dspark_headroom" and rec["label"] == "make"
    if not torch.cuda.is_available():
        assert rc == 0 and rec["sites"] == [] and "no read-back site seen" in text and "nothing was checked" in text


def test_a_factory_target_makes_a_fresh_step_each_time_and_a_step_target_is_shared(tmp_path):
    f = tmp_path / "steps.py"
    f.write_text(STEPS)
    make, fresh = T.load_factory(T.parse(f"{f}:make()"))
    assert fresh and make() is make()  # this factory returns one module-level step: loaded as a factory all the same
    make, fresh = T.load_factory(T.parse(f"{f}:step"))
    assert not fresh and make().__name__ == "step"


def test_the_study_needs_cuda_and_tables_what_it_recorded(capsys):
    from studies.headroom import gallery_and_draft as study

    if not torch.cuda.is_available():
        assert study.main([]) == 2 and "no CUDA" in capsys.readouterr().err
    rec = {"kind": "dspark_headroom", "case": "c", "label": "c", "target": "t", "fingerprint": {}, "options": {"trials": 2},
           "step_ms": 1.0, "step_ms_lo": 1.0, "step_ms_hi": 1.0, "device": "cuda",
           "sites": [{"site": "a.py:3 f", "kind": "item", "per_step": 1.0, "stubbed": False, "why_not": "its shape changes"}]}
    race = {"form": "pinned_reused", "safe": False, "flagged": True, "expected": True, "races": 19, "steps": 20}
    text = study.table({"headroom": [rec, {"case": "d", "error": "E: x"}], "races": {"forms": [race]},
                        "race_cases": [], "skipped": ["z"]})
    assert "c | a.py:3 f | item | – | – | not stubbed: its shape changes" in text
    assert "d | – | – | – | – | failed: E: x" in text and "pinned_reused | safe=False | flagged=True" in text
    assert "skipped (budget): z" in text


def _record(sites, device="cuda"):
    return {"kind": "dspark_headroom", "schema": 1, "target": "app/m.py:step", "label": "step", "device": device,
            "recorded_at": "2026-12-04T03:00:00+00:00", "options": {"trials": 5},
            "fingerprint": {"gpu": "NVIDIA H200", "driver": "580", "cuda": "13.0", "torch": "2.11"},
            "step_ms": 2.5, "step_ms_lo": 2.4, "step_ms_hi": 2.6, "sites": sites}


def test_the_headroom_page_shows_each_site_its_charge_headroom_and_why_they_differ():
    from dspark_lab.views import headroom_page

    moved = {"site": "app/m.py:10 <f>", "kind": "item", "per_step": 1.0, "stubbed": True, "why_not": "",
             "headroom_ms": 0.041, "headroom_lo": 0.012, "headroom_hi": 0.07, "charge_ms": 0.4, "agree": False,
             "charged_site": "app/m.py:10 <f>",
             "why": {"reason": "moved", "reason_text": "the wait moved", "gap_ms": -0.359, "terms": {"moved": -0.35, "rest": -0.009},
                     "new_waits": [{"site": "app/m.py:30 k"}]}}
    unseen = {"site": "app/m.py:20 g", "kind": "bool", "per_step": 2.0, "stubbed": False, "why_not": "its shape changes"}
    page = headroom_page.build_html(_record([moved, unseen]))
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>") and "<script" not in page
    assert "app/m.py:10 &lt;f&gt;" in page and "<f>" not in page  # the record's text is escaped
    assert "0.400" in page and "0.041 [0.012, 0.070]" in page and "not stubbed: its shape changes" in page
    assert "headroom minus charge -0.359 ms = moved -0.350, rest -0.009 ms" in page
    assert "a wait appeared at <code>app/m.py:30 k</code>" in page and "NVIDIA H200" in page
    empty = headroom_page.build_html(_record([], device="cpu"))
    assert "No read-back site seen (no CUDA" in empty and "Why they differ" not in empty
    import pytest

    with pytest.raises(ValueError, match="kind must be 'dspark_headroom'"):
        headroom_page.build_html({**_record([]), "kind": "other"})


def test_inspect_headroom_html_writes_the_page_beside_the_record(tmp_path, capsys):
    f = tmp_path / "steps.py"
    f.write_text(STEPS)
    out = tmp_path / "o"
    rc = cli.main(["inspect", f"{f}:step", "--headroom", "--html", "--steps", "2", "--trials", "2", "--warmup", "0",
                   "--out", str(out), "--name", "n"])
    assert rc == 0
    page = (out / "n-headroom.html").read_text()
    assert "dspark-lab inspect --headroom:" in page and f"page: {out / 'n-headroom.html'}" in capsys.readouterr().out
    assert cli.main(["inspect", f"{f}:step", "--html", "--out", str(out)]) == 2
    assert "--html goes with --headroom" in capsys.readouterr().err
