"""The studies (studies/<topic>/) and the device scripts (scripts/): each imports on CPU and answers
`--help`; the ones with a CPU mode run it; the device calls name only scripts that exist; and the
contract that keeps dspark_lab from importing a study breaks when a kit module does."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import forked_help

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"

STUDIES = sorted(p.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
                 for p in (ROOT / "studies").glob("*/*.py") if p.name != "__init__.py")
SCRIPTS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "scripts").glob("*.py"))


def run(args: list[str], timeout: float = 300, **env) -> subprocess.CompletedProcess:
    """`python ARGS` from the repository root with this checkout first on the path."""
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})


def test_the_studies_are_found_by_topic():
    topics = {m.split(".")[1] for m in STUDIES}
    assert {"interference", "known_idle", "noise", "sync_cost", "ep", "card", "inspect", "live_panel"} <= topics
    assert all((ROOT / "studies" / t / "__init__.py").exists() for t in topics)
    assert not [p.name for p in (ROOT / "scripts").iterdir() if re.search(r"issue\d", p.name)]
    assert not [p.name for p in (ROOT / "studies").rglob("*") if re.search(r"issue\d", p.name)]


@pytest.fixture(scope="module")
def help_answers(tmp_path_factory) -> dict:
    """Every study's and device script's `--help` (tests/forked_help.py: one fork each, the shared
    third-party imports made once), each with an OUT folder of its own: target -> (status, stdout,
    stderr, OUT folder)."""
    outs = {t: tmp_path_factory.mktemp("out") for t in STUDIES + SCRIPTS}
    got = forked_help.help_answers(outs, ROOT, tmp_path_factory.mktemp("answers"))
    return {t: (*got[t], outs[t]) for t in outs}


@pytest.mark.parametrize("module", STUDIES)
def test_each_study_answers_help_on_cpu(module, help_answers):
    status, stdout, stderr, out = help_answers[module]
    assert status == 0, stderr[-2000:]
    assert stdout.startswith("usage:"), stdout[:500]
    assert not list(out.iterdir()), "--help wrote files"


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_device_script_answers_help_on_cpu(script, help_answers):
    status, stdout, stderr, _ = help_answers[script]
    assert status == 0, stderr[-2000:]
    assert stdout.startswith("usage:"), stdout[:500]


def test_an_unknown_session_stage_is_refused_naming_the_stages(tmp_path):
    r = run(["scripts/gpu_session.py", "chek"], OUT=str(tmp_path))
    assert r.returncode == 2
    assert "unknown stage(s) chek; stages: check, sweep, cuda_tests, live, notebooks" in r.stderr


def test_the_known_idle_recheck_runs_on_cpu_and_writes_its_table(tmp_path):
    out = tmp_path / "recheck.json"
    r = run(["-m", "studies.known_idle.recheck", "--out", str(out)])
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["kind"] == "known_idle_recheck" and doc["fingerprint"]["gpu"] == "NVIDIA H200"
    assert {c["case"] for c in doc["cases"]} == {"one_mid", "two_syncs", "three_syncs"}
    assert r.stdout.splitlines()[0].split()[:2] == ["case", "charged"]  # the table, printed


def test_the_ep_validation_runs_on_the_recorded_runs_without_torch():
    r = run(["-m", "studies.ep.validate_recorded"])
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [line.split()[0] for line in r.stdout.splitlines()[2:]]
    assert {"allreduce", "a2a_fixed", "a2a_dynamic"} <= set(rows), r.stdout
    r = run(["-c", "import sys, studies.ep.validate_recorded; sys.exit('torch' in sys.modules)"])
    assert r.returncode == 0, "the EP validation loaded torch"


def _device_call_targets(text: str) -> list[str]:
    """What a device script runs: `python3 -m MODULE` / `$py -m MODULE` and `scripts/X.py` paths."""
    modules = re.findall(r"(?:python3|\$py) -m (studies\.[\w.]+)", text)
    return modules + re.findall(r"(scripts/[\w.]+\.py)", text)


@pytest.mark.parametrize("device_script", ["scripts/device_round.sh"])
def test_the_device_calls_name_only_scripts_that_exist(device_script):
    targets = _device_call_targets((ROOT / device_script).read_text())
    assert len(targets) >= 4, targets
    missing = [t for t in targets if not (ROOT / t).exists() and t not in STUDIES]
    assert not missing, f"{device_script} runs what is not there: {missing}"


def test_a_device_round_stage_runs_its_study(tmp_path):
    """A stage of device_round.sh on CPU: the known-idle traces stage reaches the study, which says
    it needs CUDA; an unknown stage is reported, and neither stops the round."""
    shutil.which("bash") or pytest.skip("no bash")
    # the round runs `python3`: this environment's, as on the device machine
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT), "PATH": path}
    r = subprocess.run(["bash", "scripts/device_round.sh", "traces", "no_such_stage"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "needs CUDA" in (tmp_path / "log-traces.txt").read_text()
    assert "unknown stage no_such_stage" in (tmp_path / "log-no_such_stage.txt").read_text()
    assert re.search(r"^no_such_stage\s+1\s+\d+\s+unknown stage", r.stdout, re.M), r.stdout
    assert re.search(r"^traces\s+\d+\s+\d+\s+.*needs CUDA", r.stdout, re.M), r.stdout


def test_the_device_round_by_default_runs_verify_the_cuda_suite_three_times_the_notebooks_and_the_quick_sweep():
    text = (ROOT / "scripts" / "device_round.sh").read_text()
    default = re.search(r"stages=\((verify[^)]*)\)", text).group(1).split()
    assert default == ["verify", "cuda1", "cuda2", "cuda3", "notebooks", "sweep"]
    for nb in ("01_onboarding", "02_tuning_new_gpu", "04_sync_gallery", "05_your_own_code"):
        assert nb in text


@pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter (the dev extra) is not installed")
def test_a_kit_module_importing_a_study_breaks_the_contract(tmp_path):
    for name in ("dspark_lab", "studies"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("*.jsonl", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "COLUMNS": "400"}

    def lint() -> subprocess.CompletedProcess:
        return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)

    kept = lint()
    assert "dspark_lab never imports studies" in kept.stdout and kept.returncode == 0, kept.stdout
    with open(tmp_path / "dspark_lab" / "results" / "facts" / "run_kinds.py", "a") as f:
        f.write("\nimport studies.known_idle\n")
    broken = lint()
    assert broken.returncode == 1, broken.stdout
    assert re.search(r"dspark_lab never imports studies.*BROKEN", broken.stdout)
    assert "dspark_lab.results.facts.run_kinds -> studies.known_idle" in broken.stdout
