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
