"""`bash lab.sh` as a user runs it: it prints one URL, serves on 127.0.0.1 only, answers the API with
the token and refuses it without, and a Ctrl-C (SIGINT) stops it and everything it started.

The environment step is pointed at the test's own python (DSPARK_VENV: a venv-shaped folder whose
bin/python execs sys.executable, marked as built), so the test never installs anything.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from dspark_lab.cli import launch

ROOT = Path(__file__).resolve().parents[1]
URL_RE = re.compile(r"http://(?P<host>[^:/\s]+):(?P<port>\d+)/lab/tree/(?P<path>\S+)\?token=(?P<token>[0-9a-f]+)")


def fake_venv(tmp: Path) -> Path:
    """A folder scripts/ensure_env.sh accepts as an already built venv, running this test's python."""
    venv = tmp / "venv"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    py.chmod(0o755)
    marker = venv / ".dspark-env-ok"
    marker.touch()
    later = (ROOT / "pyproject.toml").stat().st_mtime + 10
    os.utime(marker, (later, later))
    return venv


def lab_env(tmp: Path) -> dict:
    env = dict(os.environ)
    env.update(DSPARK_VENV=str(fake_venv(tmp)), DSPARK_NO_BROWSER="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               JUPYTER_CONFIG_DIR=str(tmp / "jcfg"), JUPYTER_RUNTIME_DIR=str(tmp / "jrt"),
               JUPYTER_DATA_DIR=str(tmp / "jdata"), DSPARK_LAB_MODE="recorded")
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    return env


def start_lab(tmp: Path, args=(), env=None, timeout: float = 120.0):
    """Start `bash lab.sh` in a session of its own; return (proc, url match, stdout so far)."""
    out = tmp / "lab.out"
    env = env or lab_env(tmp)
    proc = subprocess.Popen(["bash", str(ROOT / "lab.sh"), "--log", str(tmp / "jupyterlab.log"), *args],
                            cwd=ROOT, env=env, stdout=open(out, "w"), stderr=open(tmp / "lab.err", "w"),
                            start_new_session=True)
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = URL_RE.search(out.read_text())
        if m:
            return proc, m, out
        if proc.poll() is not None:
            break
        time.sleep(0.25)
    stop_hard(proc)
    raise AssertionError(f"no URL printed; stdout:\n{out.read_text()}\nstderr:\n{(tmp / 'lab.err').read_text()}\n"
                         f"log:\n{(tmp / 'jupyterlab.log').read_text()[-3000:] if (tmp / 'jupyterlab.log').exists() else ''}")


def stop_hard(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (whatever session it moved to), from /proc."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def listening_addresses(port: int) -> list[str]:
    """Local addresses (hex, as the kernel writes them) of LISTEN sockets on `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            addr, hexport = f[1].split(":")
            if int(hexport, 16) == port and f[3] == "0A":
                found.append(addr)
    return found


def other_local_addresses() -> list[str]:
    """This machine's IPv4 addresses other than loopback (empty where none can be found)."""
    addrs = set()
    try:
        import psutil

        for nics in psutil.net_if_addrs().values():
            addrs |= {a.address for a in nics if a.family == socket.AF_INET}
    except ImportError:
        try:
            addrs |= set(socket.gethostbyname_ex(socket.gethostname())[2])
        except OSError:
            pass
    return sorted(a for a in addrs if not a.startswith("127."))


def http(url: str, method: str = "GET") -> int:
    req = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def page_config(url: str) -> dict:
    """The page config JupyterLab serves in a page (its `jupyter-config-data` script)."""
    with urllib.request.urlopen(url, timeout=30) as r:
        page = r.read().decode()
    found = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S)
    assert found, "no jupyter-config-data in the page"
    return json.loads(found[1])


def test_the_kit_config_disables_the_news_toast_and_leaves_a_user_s_own_choice(tmp_path):
    pytest.importorskip("jupyter_core")
    kit, user, theirs = tmp_path / "kit", tmp_path / "user", tmp_path / "theirs"
    base = {"JUPYTER_CONFIG_DIR": str(user), "JUPYTER_CONFIG_PATH": str(theirs), "HOME": str(tmp_path)}
    env = launch.kit_config_env(base, kit)
    assert env["JUPYTER_CONFIG_PATH"].split(os.pathsep) == [str(kit), str(theirs)]  # theirs kept, after ours
    written = json.loads((kit / "labconfig" / "page_config.json").read_text())
    assert written == {"disabledExtensions": {launch.NEWS_PLUGIN: True}}
    assert not user.exists() and not theirs.exists()
    # A user whose own config decides about the plugin keeps that decision: no kit folder then.
    (user / "labconfig").mkdir(parents=True)
    own = json.dumps({"disabledExtensions": {launch.NEWS_PLUGIN: False}})
    (user / "labconfig" / "page_config.json").write_text(own)
    assert launch.kit_config_env(base, kit) == {}
    assert (user / "labconfig" / "page_config.json").read_text() == own
    assert launch.lab_env("tok", base, kit)[launch.TOKEN_ENV] == "tok"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_lab_sh_serves_localhost_only_with_a_token_and_stops_cleanly_on_sigint(tmp_path):
    pytest.importorskip("jupyterlab")
    proc, m, out = start_lab(tmp_path)
    try:
        host, port, token = m["host"], int(m["port"]), m["token"]
        text = out.read_text()
        # One URL, and one line per notebook saying what it is for.
        assert len(URL_RE.findall(text)) == 1
        assert m["path"] == f"notebooks/{launch.START_NOTEBOOK}"
        for name, what in launch.NOTEBOOKS:
            assert any(name in line and what in line for line in text.splitlines()), name
        assert "bash lab.sh report" in text and "bash lab.sh sweep" in text
        if launch.is_root():
            assert "--allow-root" in text
        # 127.0.0.1 only: the URL, the listening socket, and no answer on another local address.
        assert host == "127.0.0.1"
        assert listening_addresses(port) == ["0100007F"]
        for addr in other_local_addresses():
            with socket.socket() as s:
                s.settimeout(2)
                assert s.connect_ex((addr, port)) != 0, f"port {port} accepts on {addr}"
        base = f"http://{host}:{port}"
        assert http(f"{base}/api/status?token={token}") == 200
        # No "get notified about Jupyter news?" toast: the page's config disables the announcements
        # plugin, from the kit's own config folder; the user's config folder is not written.
        assert launch.NEWS_PLUGIN in page_config(f"{base}/lab/tree/{m['path']}?token={token}")["disabledExtensions"]
        assert not (tmp_path / "jcfg" / "labconfig").exists()
        assert http(f"{base}/api/status") in (401, 403)
        assert http(f"{base}/api/status?token={'0' * len(token)}") in (401, 403)
        # A kernel, as a notebook would start one: it must go down with the server.
        assert http(f"{base}/api/kernels?token={token}", "POST") == 201
        with urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=10) as r:
            assert len(json.loads(r.read())) == 1
        started = descendants(proc.pid)
        assert len(started) >= 2, started  # the server and the kernel

        proc.send_signal(signal.SIGINT)
        rc = proc.wait(60)
        assert rc in (0, 130), rc
        deadline = time.time() + 10  # a kernel may take a moment after its parent returns
        while time.time() < deadline and any(alive(p) for p in started):
            time.sleep(0.2)
        assert [p for p in started if alive(p)] == []
        assert listening_addresses(port) == []
        assert "stopped" in (tmp_path / "lab.err").read_text()
    finally:
        stop_hard(proc)


def test_lab_sh_report_is_one_command_away(tmp_path):
    """`bash lab.sh report` still gives the old main job's report from the recorded runs."""
    from helpers import RUNS_DIR, write_synthetic_runs

    env = lab_env(tmp_path)
    data = RUNS_DIR.parent if RUNS_DIR.is_dir() and any(RUNS_DIR.glob("*.jsonl")) else write_synthetic_runs(tmp_path / "data")
    report = tmp_path / "report.html"
    r = subprocess.run(["bash", str(ROOT / "lab.sh"), "report", str(data), "-o", str(report)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert report.stat().st_size > 0 and f"report: {report}" in r.stdout
    r = subprocess.run(["bash", str(ROOT / "lab.sh"), "cli", "--help"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "sweep" in r.stdout


def test_lab_sh_sweep_runs_the_main_job(tmp_path):
    """`bash lab.sh sweep` is `dspark-lab main`: the default sweep on a CUDA machine; without one it
    says so and reports the recorded runs (exit 0)."""
    from helpers import RUNS_DIR, write_synthetic_runs

    env = lab_env(tmp_path)
    data = RUNS_DIR.parent if RUNS_DIR.is_dir() and any(RUNS_DIR.glob("*.jsonl")) else write_synthetic_runs(tmp_path / "data")
    r = subprocess.run(["bash", str(ROOT / "lab.sh"), "sweep", "--help"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "usage: dspark-lab main" in r.stdout, r.stdout + r.stderr
    import torch

    if torch.cuda.is_available():
        return  # on a GPU the main job measures for minutes: the device round runs it
    report = tmp_path / "report.html"
    r = subprocess.run(["bash", str(ROOT / "lab.sh"), "sweep", "--data", str(data), "-o", str(report)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "No CUDA device on this machine" in r.stdout and report.stat().st_size > 0
