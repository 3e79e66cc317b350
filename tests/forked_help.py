"""Many `python -m MODULE --help` and `python SCRIPT --help` answers from one process. Every study and
device script imports torch, numpy and pandas (about 1.5 s of CPU each time in a fresh interpreter):
here they are imported once, then each target runs as __main__ in a fork of its own, so it still
imports the kit and itself afresh and sees no other target's state. Per target: exit status, stdout,
stderr, as the process would have given them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, os, runpy, sys, traceback
import numpy, pandas, torch  # what every target imports: once, before the forks
targets, folder = json.loads(sys.argv[1]), sys.argv[2]
status = {}
for i, (target, out_dir) in enumerate(targets):
    pid = os.fork()
    if pid == 0:
        for fd, name in ((1, "out"), (2, "err")):
            os.dup2(os.open(os.path.join(folder, f"{i}.{name}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        os.environ["OUT"] = out_dir
        code = 0
        try:
            if target.endswith(".py"):  # python SCRIPT: its folder first on the path
                sys.argv, sys.path[0] = [target, "--help"], os.path.dirname(os.path.abspath(target))
                runpy.run_path(target, run_name="__main__")
            else:  # python -m MODULE: the working folder first on the path
                sys.argv, sys.path[0] = [target, "--help"], os.getcwd()
                runpy.run_module(target, run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else (print(e.code, file=sys.stderr), 1)[1])
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    status[target] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(json.dumps(status))
"""


def help_answers(targets: dict, root: Path, folder: Path, timeout: float = 600) -> dict:
    """{target: (exit status, stdout, stderr)} of `target --help` for each target (a module name or a
    scripts/*.py path) -> its OUT folder, run from `root` with that checkout first on the path."""
    folder.mkdir(parents=True, exist_ok=True)
    order = list(targets)
    r = subprocess.run([sys.executable, "-c", CHILD, json.dumps([[t, str(targets[t])] for t in order]), str(folder)],
                       cwd=root, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "PYTHONPATH": str(root)})
    assert r.returncode == 0, f"the process that forks the targets failed:\n{r.stderr[-3000:]}"
    status = json.loads(r.stdout.strip().splitlines()[-1])
    return {t: (status[t], (folder / f"{i}.out").read_text(), (folder / f"{i}.err").read_text())
            for i, t in enumerate(order)}
