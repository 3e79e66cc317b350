import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from helpers import COMMITTED_DATA, NOTEBOOKS, execute_notebooks, kernel_env, synthetic_runs

# The run-file cache (dspark_lab/results/loading/cache.py) of this test session: its own folder, removed at
# exit, never the user's ~/.cache (subprocesses inherit it).
os.environ["DSPARK_CACHE"] = tempfile.mkdtemp(prefix="dspark-test-cache-")
atexit.register(shutil.rmtree, os.environ["DSPARK_CACHE"], True)

GALLERY_DIR = COMMITTED_DATA / "gallery"


# The files that take longest (the suite's --durations, summed per file, longest first) go out first: test.sh
# hands whole files to its two workers in collection order (pytest-xdist --dist loadfile
# --no-loadscope-reorder), so a long file handed out last would run alone while the other worker idles.
# Every other file keeps its place after them. A file missing here only costs balance, never a test.
LONGEST_FILES = ("test_browser.py", "test_readme_commands.py", "test_notebooks.py", "test_scale.py", "test_torchrun.py",
                 "test_cold_start.py", "test_foreign_read.py", "test_hardening_inputs.py", "test_lab_sh.py",
                 "test_hardening_hostile.py", "test_parallel.py", "test_safe_io.py", "test_figures_boxes.py",
                 "test_cli.py", "test_trace_command.py", "test_notebook01_ep.py", "test_studies.py", "test_noise.py")


def longest_first(items) -> None:
    """Reorder `items` in place: LONGEST_FILES' tests first, in that order, then the rest as collected
    (a stable sort: within a file, tests keep their order)."""
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(rank)))


def pytest_collection_modifyitems(config, items):
    longest_first(items)
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; this machine has none")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def data():
    """The synthetic set, always (a fixed input: tests must not depend on what data/runs holds)."""
    r, t, h = synthetic_runs()
    return r, t, h, False


@pytest.fixture(scope="session")
def recorded_env(tmp_path_factory) -> dict:
    """The notebooks' kernel environment: recorded mode on the committed data, exports to a temp folder."""
    extra = {}
    if not (GALLERY_DIR.is_dir() and any(GALLERY_DIR.glob("*.json"))):
        # Notebook 04 reads a recorded gallery: record a tiny one on this machine.
        from dspark_lab.gallery import report as gallery_report

        rec = gallery_report.record(device="cpu", steps=2, rounds=2)
        extra["DSPARK_GALLERY_DATA"] = str(gallery_report.save(rec, tmp_path_factory.mktemp("gallery") / "cpu.json"))
    return kernel_env(COMMITTED_DATA, tmp_path_factory.mktemp("out"), **extra)


@pytest.fixture(scope="session")
def executed_notebooks(recorded_env) -> dict:
    """Each notebook executed once per test session, top to bottom, one after another:
    name -> (notebook, seconds). Only tests/test_notebooks.py uses it: under pytest-xdist
    `--dist loadfile` one worker builds it."""
    return execute_notebooks(NOTEBOOKS, recorded_env)
