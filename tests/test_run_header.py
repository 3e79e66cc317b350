"""A run's header, typed: the code that starts a run states its kind, the writer refuses an unknown or
missing one before creating anything, and files older than the field still load with a guessed kind."""
import json

import pytest

from dspark_lab.config import LabConfig
from dspark_lab.results.facts.run_kinds import KINDS
from dspark_lab.results.query.kinds import derive_kind
from dspark_lab.results.query.runs import Runs
from dspark_lab.results.record.header import OWN_FIELDS, RunHeader
from dspark_lab.results.record.store import RunWriter, read_header
from dspark_lab.run import sweep
from test_store import FP, SWEEP, make_rows

ALLOWED = r"allowed: default_sweep, quick_sweep, sweep, reference"


def test_an_unknown_run_kind_is_refused_naming_the_field_and_the_allowed_kinds(tmp_path):
    with pytest.raises(ValueError, match=rf"run_kind 'refrence' is not known; {ALLOWED}"):
        RunWriter.create(tmp_path / "runs", fingerprint=FP, sweep=SWEEP, run_kind="refrence")
    assert not (tmp_path / "runs").exists()  # refused before anything was made


def test_a_missing_run_kind_is_refused(tmp_path):
    with pytest.raises(ValueError, match=rf"run_kind is required: .*; {ALLOWED}"):
        RunWriter.create(tmp_path / "r.jsonl", fingerprint=FP, sweep=SWEEP)
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("extra, named", [({"run_id": "x"}, "'run_id'"), ({"created_at": "x"}, "'created_at'")])
def test_extra_fields_cannot_overwrite_the_headers_own(extra, named):
    with pytest.raises(ValueError, match=rf"header field {named} is set by the header itself"):
        RunHeader("sweep", "r", "now", FP, SWEEP, extra)
    assert {"kind", "run_kind", "fingerprint", "sweep"} <= set(OWN_FIELDS)


def test_a_stated_kind_is_written_and_read_back(tmp_path):
    w = RunWriter.create(tmp_path / "r.jsonl", fingerprint=FP, sweep=SWEEP, run_kind="reference", name="mine")
    w.write_point("p1", make_rows("p1"))
    w.close()
    head = json.loads(w.path.read_text().splitlines()[0])
    assert head["run_kind"] == "reference" and head["name"] == "mine" and read_header(w.path) == head
    runs = Runs.load([tmp_path], cache=False)
    # one point, no adaptive record: the shape alone would say "single_point"; the stated kind wins
    assert derive_kind({k: v for k, v in head.items() if k != "run_kind"}, runs.rows) == "single_point"
    assert runs.kind_of(head["run_id"]) == "reference" and runs.kind_name(head["run_id"]) == KINDS["reference"]


def test_an_old_file_without_run_kind_loads_with_the_guessed_kind(tmp_path):
    w = RunWriter.create(tmp_path / "r.jsonl", fingerprint=FP, sweep=SWEEP, run_kind="single_point")
    w.write_point("p1", make_rows("p1"))
    w.close()
    lines = w.path.read_text().splitlines()
    head = json.loads(lines[0])
    del head["run_kind"]
    head["sweep"] = sweep.QUICK_SWEEP.to_dict()  # a quick sweep recorded before headers said their kind
    w.path.write_text("\n".join([json.dumps(head)] + lines[1:]) + "\n")
    runs = Runs.load([tmp_path], cache=False)
    assert "run_kind" not in runs.headers[0] and runs.kind_of(head["run_id"]) == "quick_sweep"


SPECS = [sweep.DEFAULT_SWEEP, sweep.QUICK_SWEEP, sweep.DEFAULT_SWEEP.with_(steps=3),
         sweep.SweepSpec(ep_sizes=(1, 8), batch_sizes=(1,), gammas=(4,)),
         sweep.SweepSpec(ep_sizes=(1,), batch_sizes=(8,), gammas=(4,), base=LabConfig())]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe()[:40])
@pytest.mark.parametrize("adaptive", [False, True])
def test_a_sweep_states_the_kind_its_shape_was_guessed_as(spec, adaptive):
    """The CLI's sweep and main commands now state the kind (run.sweep.run_kind) that loading used to
    guess from the header: the same kind for every shape they record."""
    header = {"sweep": spec.to_dict(), **({"adaptive": {"target_ci_pct": 1.0}} if adaptive else {})}
    assert sweep.run_kind(spec, adaptive=adaptive) == derive_kind(header)


def test_the_sweeps_kinds_are_run_kinds():
    assert set(sweep.PRESET_KINDS.values()) <= set(KINDS) and set(sweep.PRESET_KINDS) == set(sweep.PRESETS)
    one = sweep.SweepSpec(ep_sizes=(1,), batch_sizes=(8,), gammas=(4,))
    assert (sweep.run_kind(one), sweep.run_kind(one, adaptive=True)) == ("single_point", "reference")
