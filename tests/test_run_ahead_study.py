"""The run-ahead study's code path on CPU (--smoke: the tiny model; the numbers are the GPU's to give):
it writes its JSON record with the fingerprint and prints the table, one line per strategy."""
from __future__ import annotations

import json

from studies.run_ahead import reference_point


def test_the_smoke_run_writes_a_record_with_the_fingerprint_and_prints_every_strategy(tmp_path, capsys):
    assert reference_point.main(["--smoke", "--out", str(tmp_path)]) == 0
    [path] = tmp_path.glob("*-run-ahead-*.json")
    rec = json.loads(path.read_text())
    assert rec["fingerprint"]["torch"] and set(rec["strategies"]) == set(reference_point.STRATEGIES)
    assert all(set(reference_point.KEYS) <= set(r) for r in rec["strategies"].values())
    out = capsys.readouterr().out.splitlines()
    assert all(any(line.startswith(s) for line in out) for s in reference_point.STRATEGIES)
