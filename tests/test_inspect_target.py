"""`dspark-lab inspect TARGET`: target parsing, every bad input (one line naming the target, exit 2,
nothing written), the time limit, and the guard's verdict. CPU tests; the targets written here import
no torch, so the worker process that loads them starts fast."""
from __future__ import annotations

import textwrap

import pytest

from dspark_lab.cli import main as cli
from dspark_lab.cli.inspect import guard_status
from dspark_lab.run import target as T
from dspark_lab.run import worker

from helpers import inspect_record

STEPS = textwrap.dedent("""
    CALLS = []

    def step():
        CALLS.append(1)
        return len(CALLS)

    def make():
        return step

    def make_number():
        return 3

    def needs(a, b=1):
        return a

    def boom():
        raise ValueError("nope")

    def forever():
        while True:
            pass

    class Runner:
        @staticmethod
        def go():
            return 0

    NOT_CALLABLE = 5
""")


@pytest.fixture
def steps_file(tmp_path):
    p = tmp_path / "my_steps.py"
    p.write_text(STEPS)
    return p


@pytest.mark.parametrize("text, module, attr, is_file, factory", [
    ("pkg.mod:step", "pkg.mod", "step", False, False),
    ("pkg.mod:make()", "pkg.mod", "make", False, True),
    ("path/to/file.py:step", "path/to/file.py", "step", True, False),
    ("file.py:Runner.go", "file.py", "Runner.go", True, False),
    ("C:/x/file.py:step", "C:/x/file.py", "step", True, False),
])
def test_a_target_is_parsed_into_its_module_and_callable(text, module, attr, is_file, factory):
    t = T.parse(text)
    assert (t.module, t.attr, t.is_file, t.factory) == (module, attr, is_file, factory)
    assert t.label == attr.rsplit(".", 1)[-1]


@pytest.mark.parametrize("text, words", [
    ("pkg.mod", "no ':CALLABLE' given"), (":step", "must read"), ("pkg.mod:", "must read"),
    ("pkg.mod:not-a-name", "not a Python name"), ("pkg mod:step", "neither a dotted module name"), ("", "must read"),
])
def test_a_malformed_target_is_refused_naming_it(text, words):
    with pytest.raises(T.TargetError) as e:
        T.parse(text)
    assert words in str(e.value) and repr(text.strip()) in str(e.value)


def test_a_step_a_factory_and_a_marked_factory_all_give_the_step(steps_file):
    for name in ("step", "make", "make()", "Runner.go"):
        step = T.load_step(T.parse(f"{steps_file}:{name}"))
        assert callable(step) and T.required_parameters(step) == []


@pytest.mark.parametrize("name, words", [
    ("missing", "does not import: "),
    ("NOT_CALLABLE", "'NOT_CALLABLE' is not callable (its type is int)"),
    ("needs", "'needs' needs arguments (a)"),
    ("boom", "'boom' raised ValueError: nope"),
    ("make_number()", "the factory make_number() returned a non-callable (int)"),
])
def test_each_bad_target_gets_one_line_naming_it(steps_file, name, words):
    text = f"{steps_file}:{name}"
    with pytest.raises(T.TargetError) as e:
        T.load_step(T.parse(text))
    msg = str(e.value)
    assert words in msg and msg.startswith(f"target {text!r}: ") and "\n" not in msg


def test_a_file_that_does_not_import_says_why(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("def step(:\n")
    for text, words in ((f"{bad}:step", "does not import: SyntaxError"),
                        (f"{tmp_path / 'absent.py'}:step", "does not import: no file"),
                        ("dspark_lab.no_such_module:step", "does not import: ModuleNotFoundError")):
        with pytest.raises(T.TargetError, match=words):
            T.load_step(T.parse(text))


def test_source_lines_are_read_only_under_the_targets_folder(steps_file):
    assert T.parse(f"{steps_file}:step").source_root() == steps_file.parent.resolve()


def test_a_bad_target_exits_2_with_one_line_and_writes_nothing(steps_file, tmp_path, capsys):
    out = tmp_path / "out"
    rc = cli.main(["inspect", f"{steps_file}:needs", "--out", str(out), "--steps", "1", "--trials", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not out.exists()
    assert err.count("\n") == 0 and f"{steps_file}:needs" in err and "needs arguments" in err


def test_a_target_past_the_time_limit_is_stopped_exit_2_nothing_written(steps_file, tmp_path, capsys):
    out = tmp_path / "out"
    rc = cli.main(["inspect", f"{steps_file}:forever", "--out", str(out), "--time-limit", "1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not out.exists()
    assert "ran past the time limit of 1 s (stopped)" in err and "forever" in err


def test_the_time_limit_must_be_positive():
    with pytest.raises(ValueError, match="time_limit_s must be > 0"):
        worker.run_job(("inspect", ("x.py:step",), {}), 0)


def test_diff_of_a_target_and_a_record_is_refused(tmp_path, capsys):
    rc = cli.main(["diff", "a.py:step", str(tmp_path / "b.json"), "--out", str(tmp_path / "o")])
    assert rc == 2 and "both be targets or both records" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_the_guard_verdict_fails_on_a_line_not_allowed_and_says_when_nothing_was_checked():
    rec = inspect_record("s")
    rec["guard"] = {"checked": ["sync debug mode"], "allow": ["read_back"], "violations": ["a/b.py:3 f"], "allowed": []}
    assert guard_status(rec, strict=False) == (1, "guard: 1 host sync line(s) not allowed: a/b.py:3 f")
    rec["guard"]["violations"] = []
    assert guard_status(rec, strict=False)[0] == 0
    rec["guard"] = {"checked": [], "allow": [], "violations": [], "allowed": [], "note": "no CUDA"}
    assert guard_status(rec, strict=False) == (0, "guard: no CUDA")
    assert guard_status(rec, strict=True)[0] == 1


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["scalar_item", "boolean_mask", "pageable_copy"])
def test_on_cuda_inspect_names_the_documented_sync_lines_with_their_cost(name):
    from pathlib import Path

    from dspark_lab.gallery import cases as C
    from dspark_lab.gallery import registry
    from dspark_lab.results.record.sync_sites import parse_site
    from dspark_lab.run.inspect import inspect_step

    case = registry.get(name)
    state = C.make_state(scale_name="gpu")
    rec = inspect_step(lambda: case.step(state), steps=10, trials=2, source_root=Path(C.__file__).parent)
    documented = [parse_site(s) for s in case.sites()]
    measured = [parse_site(s["site"]) for s in rec["sites"]]
    # Each documented line is one site: by its line where sync debug mode sees it, else by its function.
    assert len(measured) == len(documented)
    assert {m.where for m in measured} == {d.where for d in documented}
    for s in rec["sites"]:
        assert s["per_step"] == pytest.approx(1) and s["host_blocked_ms"] > 0 and s["code"]
    # The idle each sync caused is charged by SYNC_COST_RULE; the gallery's steps queue little GPU work,
    # so on an H200 it can be 0 (the GPU was idle anyway): never negative, a part of the GPU's idle.
    # (Its cap is the host time of the op that made the sync, longer than the bare blocked call.)
    assert 0 <= rec["parts"]["gpu_idle_sync_caused_ms"] <= rec["parts"]["gpu_idle_ms"] + 1e-6
    assert len(rec["guard"]["violations"]) == len(documented)


def test_a_source_line_is_quoted_only_from_a_python_file_under_the_targets_folder(tmp_path):
    from dspark_lab.results.record.sync_sites import parse_site
    from dspark_lab.run.inspect import source_line

    root = tmp_path / "proj" / "pkg"
    root.mkdir(parents=True)
    (root / "mod.py").write_text("a = 1\nx.item()  # the sync\n")
    (tmp_path / "proj" / "secret.py").write_text("a = 1\nTOKEN = 'do not read'\n")
    assert source_line(parse_site("pkg/mod.py:2 step"), root) == "x.item()  # the sync"
    assert source_line(parse_site("proj/secret.py:2 step"), root) is None  # outside the folder: not read
    assert source_line(parse_site("pkg/../../proj/secret.py:2 f"), root) is None
    assert source_line(parse_site("pkg/mod.py:9 step"), root) is None  # no such line
    assert source_line(parse_site("pkg/mod.py:2 step"), None) is None


def test_sites_and_their_costs_from_a_recorded_h200_trace_with_stacks():
    """The trace of the kit's device_direct step (tests/fixtures, H200, Python stacks): one sync a step
    in strategies.device_direct; the lagged readback (by design) is no site."""
    from pathlib import Path

    from dspark_lab.measure import breakdown, syncs, trace
    from dspark_lab.run.inspect import _sites

    ev = trace.events(Path(__file__).parent / "fixtures" / "traces" / "sglang_profile_ep1_device_direct_stacks.rank0.json.gz")
    calls = syncs.sync_calls(ev)
    (only,) = _sites({}, calls, ev, None, ())
    assert (only["site"], only["per_step"], only["exact"]) == ("dspark_lab/strategies.py:20 device_direct", 1.0, False)
    parts = breakdown.summary(ev, calls=calls)  # the same steps (the first left out) as the site's costs
    assert only["host_blocked_ms"] == pytest.approx(parts["host_blocked_ms"])
    # A site is charged each of its syncs' whole idle (which runs on into the next step's window), per
    # step after the first; the step total clips the same gaps to each step's window instead.
    caused = breakdown.sync_caused_gaps(ev, calls)
    mine = caused[caused.sync_step >= 1]
    assert only["gpu_idle_ms"] == pytest.approx((mine.end - mine.start).sum() / 1e3 / (len(syncs.step_windows(ev)) - 1))
    assert 0 < only["gpu_idle_ms"] <= parts["gpu_idle_sync_caused_ms"] * 1.1
    # Sync debug mode's exact line of the same function replaces the function-level name, costs and all.
    (exact,) = _sites({"dspark_lab/strategies.py:25 device_direct": 1.0}, calls, ev, None, ["device_direct"])
    assert exact["exact"] and exact["allowed"] and exact["gpu_idle_ms"] == only["gpu_idle_ms"]


# --- a target in a subfolder: one site per sync, whoever named its file ----------------------
FIXTURE_TRACE = "sglang_profile_ep1_device_direct_stacks.rank0.json.gz"
KIT_FRAME = "dspark_lab/strategies.py(20): device_direct"  # the fixture's innermost frame outside torch


def _trace_as_from_its_own_folder(tmp_path):
    """The fixture trace as the profiler writes it for /TMP/SUB/FILE.py imported with SUB on sys.path
    (as run.target does): the frame names "FILE.py(20)", relative to that sys.path entry."""
    from pathlib import Path

    from dspark_lab.measure import trace

    sub = tmp_path / "SUB"
    sub.mkdir()
    (sub / "FILE.py").write_text("\n" * 19 + "def device_direct():\n" + "    pass\n" * 10)
    ev = trace.events(Path(__file__).parent / "fixtures" / "traces" / FIXTURE_TRACE)
    assert (ev.name == KIT_FRAME).any(), "the fixture no longer holds the frame this test renames"
    ev = ev.assign(name=ev.name.where(ev.name != KIT_FRAME, "FILE.py(20): device_direct"))
    return ev, sub


def test_the_profilers_relative_frame_names_the_file_as_traceback_does(tmp_path, monkeypatch):
    import traceback

    from dspark_lab.measure import syncs

    ev, sub = _trace_as_from_its_own_folder(tmp_path)
    monkeypatch.chdir(tmp_path)  # the folder above SUB, as `dspark-lab inspect /abs/SUB/FILE.py:f` from there
    monkeypatch.syspath_prepend(str(sub.resolve()))
    calls = syncs.sync_calls(ev)
    assert set(calls[~calls.readback].site) == {"SUB/FILE.py(20): device_direct"}  # the readback is by design
    frame = traceback.FrameSummary(str((sub / "FILE.py").resolve()), 25, "device_direct")
    assert syncs.site_of(traceback.StackSummary.from_list([frame])) == "SUB/FILE.py:25 device_direct"


@pytest.mark.parametrize("on_sys_path", [True, False])
def test_a_sync_in_a_subfolder_target_is_one_site_with_its_costs(tmp_path, monkeypatch, on_sys_path):
    """Whether or not the file can be found again (on sys.path here; a record read elsewhere), the
    trace's def-line name of a function whose exact line debug mode gave is not a second site."""
    from dspark_lab.measure import breakdown, syncs
    from dspark_lab.run.inspect import _sites

    ev, sub = _trace_as_from_its_own_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    if on_sys_path:
        monkeypatch.syspath_prepend(str(sub.resolve()))
    calls = syncs.sync_calls(ev)
    sites = _sites({"SUB/FILE.py:25 device_direct": 1.0}, calls, ev, None, ())
    assert [(s["site"], s["per_step"], s["exact"]) for s in sites] == [("SUB/FILE.py:25 device_direct", 1.0, True)]
    assert sum(s["per_step"] for s in sites) == pytest.approx(len(calls[~calls.readback]) / len(syncs.step_windows(ev)))
    assert sites[0]["host_blocked_ms"] == pytest.approx(breakdown.summary(ev, calls=calls)["host_blocked_ms"])


@pytest.mark.parametrize("exact, function_level, want", [
    # two syncs on two lines of one function; the trace names the function once, twice a step
    ({"SUB/FILE.py:16 f": 1.0, "SUB/FILE.py:17 f": 1.0}, {"FILE.py(15): f": 2.0},
     {"SUB/FILE.py:16 f": 1.0, "SUB/FILE.py:17 f": 1.0}),
    # a loop syncing three times on one line
    ({"SUB/FILE.py:16 f": 3.0}, {"FILE.py(15): f": 3.0}, {"SUB/FILE.py:16 f": 3.0}),
    # the same file and function name elsewhere is another site
    ({"SUB/FILE.py:16 f": 1.0}, {"OTHER/FILE.py(15): f": 1.0}, {"SUB/FILE.py:16 f": 1.0, "OTHER/FILE.py:15 f": 1.0}),
    # a sync only the trace saw (another function) stays, at its def line
    ({"SUB/FILE.py:16 f": 1.0}, {"FILE.py(30): g": 1.0}, {"SUB/FILE.py:16 f": 1.0, "FILE.py:30 g": 1.0}),
])
def test_each_sync_is_one_site_however_its_file_was_spelled(exact, function_level, want):
    from dspark_lab.results.record.sync_sites import distinct_lines, merge_sites

    assert merge_sites(exact, function_level) == want
    recs = [(s, True) for s in exact] + [(s, False) for s in function_level]
    assert distinct_lines(recs) == list(want)


def test_diff_of_two_subfolder_targets_reports_each_site_once(tmp_path, monkeypatch):
    from dspark_lab.measure import syncs
    from dspark_lab.results.analyses.step_diff import site_changes
    from dspark_lab.run.inspect import _sites

    ev, sub = _trace_as_from_its_own_folder(tmp_path)
    monkeypatch.chdir(tmp_path)
    calls = syncs.sync_calls(ev)
    before = inspect_record("before")
    before["sites"] = _sites({"SUB/FILE.py:25 device_direct": 1.0}, calls, ev, None, ())
    after = inspect_record("after")  # the fix: no sync left
    table = site_changes(before, after)
    assert table[["status", "site"]].values.tolist() == [["removed", "SUB/FILE.py:25 device_direct"]]


SUBFOLDER_STEP = textwrap.dedent("""
    import torch

    X = torch.ones(4, device="cuda")

    def step():
        a = X.sum().item()
        b = X.max().item()
        return a + b

    def loop():
        for _ in range(3):
            X.sum().item()
""")


@pytest.mark.cuda
@pytest.mark.parametrize("attr, lines", [("step", {7: 1.0, 8: 1.0}), ("loop", {13: 3.0})])
def test_on_cuda_a_subfolder_target_lists_each_sync_once(tmp_path, monkeypatch, attr, lines):
    """`dspark-lab inspect /abs/SUB/FILE.py:FUNC` from the folder above SUB: each sync at its exact
    line, once; the site table sums to the per-step count."""
    from dspark_lab.run.inspect import inspect_step

    sub = tmp_path / "SUB"
    sub.mkdir()
    (sub / "FILE.py").write_text(SUBFOLDER_STEP)
    monkeypatch.chdir(tmp_path)
    target = T.parse(f"{(sub / 'FILE.py').resolve()}:{attr}")
    fn = T.load_step(target)
    rec = inspect_step(fn, target=target.text, steps=5, trials=2, source_root=sub)
    got = {s["site"]: s["per_step"] for s in rec["sites"]}
    assert got == {f"SUB/FILE.py:{line} {attr}": n for line, n in lines.items()}
    assert all(s["exact"] for s in rec["sites"])
    assert sum(got.values()) == pytest.approx(rec["counts"]["syncs_per_step"])


# --- what the texts say without CUDA, and beside a CI from few trials ------------------------
@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the no-CUDA record")
def test_without_cuda_inspect_says_n_a_for_copies_never_zero():
    from dspark_lab.run.inspect import NO_CUDA_COPY_COUNTS, inspect_step
    from dspark_lab.views.inspect_page import report_text

    rec = inspect_step(lambda: sum(range(100)), steps=3, trials=2, warmup=1)
    assert all(rec["counts"][k] != rec["counts"][k] for k in NO_CUDA_COPY_COUNTS)  # NaN: not measurable
    line = next(ln for ln in report_text(rec).splitlines() if ln.startswith("device-to-host copies"))
    assert line == "device-to-host copies per step n/a (into pageable memory n/a); host-to-device pageable n/a"


@pytest.mark.parametrize("trials, rough", [(5, True), (10, False)])
def test_a_ci_from_fewer_trials_than_the_headline_floor_says_so(trials, rough):
    from dspark_lab.results.rules.noise import MIN_QUIET_ROUNDS
    from dspark_lab.views.inspect_page import report_text

    rec = inspect_record("s", trials=tuple(2.0 + 0.01 * i for i in range(trials)))
    step = next(ln for ln in report_text(rec).splitlines() if ln.startswith("step "))
    assert (f"under the {MIN_QUIET_ROUNDS} quiet rounds a headline needs" in step) is rough
    assert (f"{trials} trials, under" in step) is rough


def test_diff_without_cuda_says_no_sync_could_be_seen_and_how_rough_its_ci_is():
    from dspark_lab.results.analyses import step_diff

    before, after = inspect_record("a", device="cpu"), inspect_record("b", device="cpu")
    d = step_diff.diff(before, after)
    text, md = step_diff.text(d), step_diff.markdown(d)
    assert "none seen: without CUDA no sync can be seen" in text and "none in either step" not in text
    assert "Sync sites: none seen: without CUDA" in md
    assert "CIs from 5 trials, under the 10 quiet rounds" in text and "CIs from 5 trials" in md
    on_cuda = step_diff.text(step_diff.diff(inspect_record("a"), inspect_record("b")))
    assert "none in either step" in on_cuda


@pytest.mark.parametrize("command", ["inspect", "diff"])
def test_the_help_shows_95_percent_not_a_doubled_percent_sign(command, capsys):
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    assert "95% CI" in out and "%%" not in out
