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
