"""`bash test.sh` runs two halves (core, then sglang) and says how each ended: a failed core half
neither hides nor skips the sglang half, and the exit status is non-zero when either failed. Both
environments are stand-ins here (DSPARK_VENV, DSPARK_SGLANG_VENV): a python that logs its pytest
run and exits with the status the test asks for."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LATER = (ROOT / "pyproject.toml").stat().st_mtime + 10


def stand_in_venv(folder: Path, marker: str, status: int, log: Path) -> Path:
    """A venv the set-up script accepts as built, whose python answers `-m pytest` with `status`
    (logged) and anything else with 1 (no nbstripout: the clone's git filter is left alone)."""
    (folder / "bin").mkdir(parents=True)
    py = folder / "bin" / "python"
    py.write_text(f'#!/bin/sh\nif [ "$1 $2" = "-m pytest" ]; then echo "{folder.name} $*" >>"{log}"; exit {status}; fi\nexit 1\n')
    py.chmod(0o755)
    (folder / marker).touch()
    os.utime(folder / marker, (LATER, LATER))
    return folder


def run_test_sh(tmp: Path, core: int, sglang: int, **env) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = tmp / "pytest.log"
    # test.sh's own settings come from the test alone, not from how this suite was started
    # (`DSPARK_SKIP_SGLANG=1 bash test.sh` runs these tests too).
    inherited = {k: v for k, v in os.environ.items() if k not in ("DSPARK_SKIP_SGLANG", "DSPARK_TEST_WORKERS")}
    environ = {**inherited, **env,
               "DSPARK_VENV": str(stand_in_venv(tmp / "core", ".dspark-env-ok", core, log)),
               "DSPARK_SGLANG_VENV": str(stand_in_venv(tmp / "sglang", ".dspark-sglang-0.5.23-ok", sglang, log))}
    r = subprocess.run(["bash", str(ROOT / "test.sh")], cwd=ROOT, env=environ, capture_output=True, text=True,
                       timeout=120)
    return r, [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("core, sglang, status", [(0, 0, 0), (1, 0, 1), (0, 1, 1), (2, 1, 2)])
def test_both_halves_run_and_each_says_how_it_ended(tmp_path, core, sglang, status):
    r, ran = run_test_sh(tmp_path, core, sglang)
    assert ran == ["core", "sglang"], r.stderr[-2000:]
    assert r.returncode == status
    said = r.stderr.splitlines()[-2:]
    assert said[0].startswith("test.sh: core half") and said[0].endswith("passed" if core == 0 else f"failed (exit {core})")
    assert said[1].startswith("test.sh: sglang half") and said[1].endswith("passed" if sglang == 0 else f"failed (exit {sglang})")


def test_a_skipped_sglang_half_is_said_not_run(tmp_path):
    r, ran = run_test_sh(tmp_path, 1, 0, DSPARK_SKIP_SGLANG="1")
    assert ran == ["core"] and r.returncode == 1
    assert r.stderr.splitlines()[-1] == "test.sh: sglang half (scripts/sglang_env.sh): not run (DSPARK_SKIP_SGLANG=1)"


def test_an_interrupted_core_half_stops_the_suite_and_says_the_sglang_half_did_not_run(tmp_path):
    r, ran = run_test_sh(tmp_path, 130, 0)
    assert ran == ["core"] and r.returncode == 130
    assert r.stderr.splitlines()[-1].endswith("not run (the core half was interrupted)")


def test_the_longest_files_go_out_first_and_every_file_keeps_its_tests_in_order():
    from types import SimpleNamespace

    from conftest import LONGEST_FILES, longest_first

    assert len(set(LONGEST_FILES)) == len(LONGEST_FILES)
    missing = [f for f in LONGEST_FILES if not (ROOT / "tests" / f).is_file()]
    assert not missing, f"conftest.LONGEST_FILES names files that are gone: {missing}"
    names = ["test_a.py", "test_a.py", LONGEST_FILES[1], "test_z.py", LONGEST_FILES[0], LONGEST_FILES[1]]
    items = [SimpleNamespace(fspath=f"/x/tests/{n}", i=i) for i, n in enumerate(names)]
    longest_first(items)
    assert [(Path(it.fspath).name, it.i) for it in items] == [
        (LONGEST_FILES[0], 4), (LONGEST_FILES[1], 2), (LONGEST_FILES[1], 5), ("test_a.py", 0), ("test_a.py", 1),
        ("test_z.py", 3)]
