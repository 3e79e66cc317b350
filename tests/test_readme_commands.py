"""Every command in the README is run here, as a user runs it, so a job cannot break while its
documentation stays. The commands are read from the README itself: each line of its bash code
blocks and each command in the first column of its tables. A command the README gains without an
entry in HOW below fails `test_every_readme_command_has_a_way_to_run_it`, naming it.

Each entry says what the command must print and how it runs here: on CPU (the recorded runs), or
only on CUDA (marked `cuda`: the device round runs it). Arguments appended to a command only keep
it off the repository's data (its outputs go to the test's folder) or make it cheap; the list of
commands and how each was run is printed (`pytest -s`, or the report's captured output).
`dspark-lab` is `python -m dspark_lab.cli` (the installed console script's target), and
`bash lab.sh` / `bash test.sh` are started with the environment step pointed at this python.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COMMAND_STARTS = ("bash ", "dspark-lab ")


def readme_commands(text: str) -> list[str]:
    """The commands of a README: bash code-block lines (comments cut) and first table cells."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        lines = (re.sub(r"(^|\s)#.*", "", line).strip() for line in block.splitlines())
        found += [line for line in lines if line]
    for row in re.findall(r"(?m)^\|(.+)\|\s*$", text):
        cell = re.fullmatch(r"\s*`([^`]+)`\s*", row.split("|")[0])
        if cell and cell[1].startswith(COMMAND_STARTS):
            found.append(cell[1])
    return list(dict.fromkeys(found))


def inline_commands(text: str) -> list[str]:
    """Commands named in prose (inline code starting like a command), outside code blocks."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return sorted({m for m in re.findall(r"`([^`\n]+)`", prose) if m.startswith(COMMAND_STARTS)})


@dataclass(frozen=True)
class Run:
    expect: tuple  # what the output (stdout + stderr) must hold, each
    extra: tuple = ()  # appended arguments ("{tmp}" is the test's folder)
    env: dict = field(default_factory=dict)
    timeout: int = 600
    gpus: int = 1  # CUDA runs: the GPUs it needs
    status: int = 0  # the exit status it must end with


@dataclass(frozen=True)
class How:
    cpu: Optional[Run]  # None: it measures, CUDA only
    cuda: Optional[Run] = None  # None: the CPU run, also on a CUDA machine


TMP_REPORT = ("-o", "{tmp}/report.html")
# Without CUDA (cli/needs_cuda.py); --out keeps a regression that measures anyway off data/runs/.
NO_CUDA = Run(("needs a CUDA GPU and this machine has none", "no run file written"), extra=("--out", "{tmp}/runs"), status=6)
HOW = {
    "bash lab.sh": How(Run(("dspark-lab is running", "http://127.0.0.1:"))),  # started, then Ctrl-C: below
    "bash test.sh": How(Run(("collected",), extra=("--collect-only", "-q", "tests/test_layers.py"),
                            env={"DSPARK_SKIP_SGLANG": "1", "DSPARK_TEST_WORKERS": "0"})),
    "bash lab.sh sweep": How(Run(("No CUDA device on this machine", "headline: "), extra=TMP_REPORT),
                             cuda=Run(("running the quick sweep", "95% CI", "report: "),  # dspark-lab main: the default
                                      extra=("--preset", "quick", "--data", "{tmp}/data", *TMP_REPORT, "--no-progress"))),
    "bash lab.sh report": How(Run(("headline: ", "report: "), extra=TMP_REPORT)),
    "bash lab.sh cli --help": How(Run(("usage: dspark-lab", "inspect"))),
    "dspark-lab doctor": How(Run(("fingerprint", "torch ", "verified on this GPU"))),
    "dspark-lab verify": How(Run(("[n/a ] syncs/all", "[n/a ] clocks/all", "nothing could be checked here"), status=6),
                             cuda=Run(("verified on this GPU:",), extra=("--out", "{tmp}/verify.json"))),
    "dspark-lab lint dspark_lab/gallery": How(Run(("gallery/cases.py:", "item: `.item()`"), status=1)),
    "dspark-lab doctor --card": How(None, cuda=Run(("h2d", "d2h", "saved "), extra=("--card-out", "{tmp}/card.json"))),
    "dspark-lab doctor --compare data/machines/h200-card-20261201.json data/machines/h200-card-20261201-1406.json":
        How(Run(("compared cell by cell", "258 cells on both cards"))),
    "dspark-lab sweep --preset quick": How(NO_CUDA, cuda=Run(("done: ",), extra=("--out", "{tmp}/runs", "--no-progress"))),
    "dspark-lab sweep --ep 8 --batch 8 --gamma 4 --target-ci 3 --time-cap 8":
        How(NO_CUDA, cuda=Run(("done: 1 measured",), extra=("--out", "{tmp}/runs", "--no-progress"))),
    "dspark-lab main": How(Run(("No CUDA device on this machine", "headline: "), extra=TMP_REPORT),
                           cuda=Run(("running the default sweep", "95% CI"),
                                    extra=("--data", "{tmp}/data", *TMP_REPORT, "--no-progress"))),
    "dspark-lab report data/runs -o out/report.html": How(Run(("report: {tmp}/report.html (",),
                                                              extra=TMP_REPORT)),
    "dspark-lab ep --world 2 --dispatch allreduce,a2a_fixed,a2a_dynamic --rank0-delay-ms 1":
        How(NO_CUDA, cuda=Run(("wrote ", "(max over ranks, median trial)"), extra=("--out", "{tmp}/runs"), gpus=2)),
    "dspark-lab inspect dspark_lab.gallery.targets:scalar_item":
        How(Run(("dspark_lab.gallery.targets:scalar_item", "host syncs per step", "record: "),
                extra=("--steps", "3", "--trials", "3", "--warmup", "1", "--out", "{tmp}/inspect"))),
    "dspark-lab trace tests/fixtures/foreign_traces/cuda_event_sync.json.gz --html":
        How(Run(("an event wait (cudaEventSynchronize)", "record: ", "page: "), extra=("--out", "{tmp}/trace"))),
    "dspark-lab diff dspark_lab.gallery.targets:scalar_item dspark_lab.gallery.targets:scalar_item_fix":
        How(Run(("sync sites",), extra=("--steps", "3", "--trials", "3", "--warmup", "1", "--out", "{tmp}/diff"))),
}


def test_every_readme_command_has_a_way_to_run_it():
    text = README.read_text(encoding="utf-8")
    commands = readme_commands(text)
    print("the README's commands, each run by tests/test_readme_commands.py:\n  " + "\n  ".join(commands))
    assert [c for c in commands if c not in HOW] == [], "README commands with no entry in HOW (add one)"
    assert [c for c in HOW if c not in commands] == [], "entries in HOW for commands the README no longer has"
    # A command named in prose is one of them, or the first words of one (`dspark-lab ep`).
    named = [c for c in inline_commands(text) if not any(k == c or k.startswith(c + " ") for k in commands)]
    assert named == [], "commands named in the README's prose that no test runs"


def test_the_extraction_reads_code_blocks_and_table_cells():
    text = "x\n```bash\nbash a.sh   # what it does\n\n# a comment\ndspark-lab b --c 1\n```\n| `dspark-lab d` | e |\n| f | `bash g` |\n"
    assert readme_commands(text) == ["bash a.sh", "dspark-lab b --c 1", "dspark-lab d"]
    assert inline_commands("see `bash lab.sh sweep` and `other`\n```bash\nbash x\n```") == ["bash lab.sh sweep"]


def test_the_sglang_environment_s_build_time_is_stated_once_in_the_readme():
    """One fact in one place: the README's set-up says how long the sglang environment takes to build;
    test.sh points there and states no duration of its own."""
    readme = README.read_text(encoding="utf-8")
    setup = readme.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"sglang[^.]*?\d+(\.\d+)? min", setup), "the README's set-up states the sglang build time"
    script = (ROOT / "test.sh").read_text()
    assert not re.search(r"\d+(\.\d+)?\s*(min|minutes|s)\b", script), "test.sh states a duration: the README does"
    assert 'README, "Set-up"' in script


def _cases() -> list:
    """Each command as a case: `cuda` where it runs only there, `readme_job` where it measures on a GPU
    (minutes: the device round runs these as a stage of their own, not inside the CUDA suite)."""
    def marks(how: How) -> list:
        return ([pytest.mark.cuda] if how.cpu is None else []) + \
            ([pytest.mark.readme_job] if how.cpu is None or how.cuda is not None else [])
    return [pytest.param(cmd, how, marks=marks(how), id=cmd[:80]) for cmd, how in HOW.items()]


def _env(tmp: Path, run: Run) -> dict:
    from test_lab_sh import lab_env

    env = lab_env(tmp)  # bash lab.sh / test.sh: the environment step runs this python; no browser
    env.pop("DSPARK_LAB_MODE", None)
    env.update({k: v.format(tmp=tmp) for k, v in run.env.items()})
    return env


def _argv(cmd: str, run: Run, tmp: Path) -> list[str]:
    words = cmd.split()
    if words[0] == "dspark-lab":
        words = [sys.executable, "-m", "dspark_lab.cli", *words[1:]]
    return words + [a.format(tmp=tmp) for a in run.extra]


@pytest.mark.parametrize("cmd, how", _cases())
def test_the_readme_command_runs(cmd, how, tmp_path):
    import torch

    cuda = torch.cuda.is_available()
    run = (how.cuda or how.cpu) if cuda else how.cpu
    if run is None:
        pytest.skip("measures on CUDA: the device round runs it")
    if cuda and run.gpus > torch.cuda.device_count():
        pytest.skip(f"needs {run.gpus} GPUs")
    if cmd == "bash lab.sh":
        return _run_the_lab(tmp_path, run)
    argv = _argv(cmd, run, tmp_path)
    print("ran:", " ".join(argv))
    r = subprocess.run(argv, cwd=ROOT, env=_env(tmp_path, run), capture_output=True, text=True, timeout=run.timeout)
    out = r.stdout + r.stderr
    assert r.returncode == run.status, f"{cmd}: exit {r.returncode}, not {run.status}\n{out[-3000:]}"
    missing = [e.format(tmp=tmp_path) for e in run.expect if e.format(tmp=tmp_path) not in out]
    assert missing == [], f"{cmd} did not print {missing}:\n{out[-3000:]}"


def _run_the_lab(tmp: Path, run: Run) -> None:
    """`bash lab.sh`: it prints its URL and banner, and Ctrl-C stops it with exit 0."""
    pytest.importorskip("jupyterlab")
    from test_lab_sh import start_lab, stop_hard

    proc, _, out = start_lab(tmp, env=_env(tmp, run))
    try:
        text = out.read_text()
        assert [e for e in run.expect if e not in text] == [], text
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
    finally:
        stop_hard(proc)
    print("ran: bash lab.sh, then Ctrl-C")
    assert os.path.exists(tmp / "lab.out")
