"""`bash lab.sh`'s JupyterLab gets its token through the environment (never on a
command line `ps` shows every user), and dies with its launcher on SIGINT, SIGTERM, SIGHUP and
SIGKILL. A stand-in server (a `jupyterlab` module earlier on the path, answering /api/status only
with the token it was given) keeps this test to a second per signal; the real server's kernels
follow it through ipykernel's parent watch (JPY_PARENT_PID), which the lead's browser test covers."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dspark_lab.cli import launch

REPO = Path(__file__).resolve().parents[1]
FAKE_SERVER = """
import http.server, json, os, sys, urllib.parse
port = int(next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--ServerApp.port=")))
token = os.environ.get("JUPYTER_TOKEN", "")
info = os.environ["FAKE_SERVER_INFO"]
with open(info + ".tmp", "w") as f:
    json.dump({"pid": os.getpid(), "argv": sys.argv}, f)
os.replace(info + ".tmp", info)

class Status(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = bool(token) and urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query).get("token") == [token]
        self.send_response(200 if ok else 403)
        self.end_headers()
        self.wfile.write(b"{}" if ok else b"")

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", port), Status).serve_forever()
"""
WAIT_S = 60.0  # a bound on each wait below (a loaded 2-core machine), never a measured threshold


def _stat(path) -> list:
    """A /proc/PID/stat's fields after the command's name (state first, then the parent's pid); [] when gone."""
    try:
        return Path(path).read_bytes().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody has reaped yet (it runs nothing)."""
    fields = _stat(f"/proc/{pid}/stat")
    return not fields or fields[0] == b"Z"


def _wait_for(what: str, ready) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {WAIT_S:.0f} s")
        time.sleep(0.05)


def _url_line(proc: subprocess.Popen) -> str:
    """The banner's URL line, read from the raw pipe (a text reader's buffer would hide it from select)."""
    deadline, seen = time.monotonic() + WAIT_S, b""
    fd = proc.stdout.fileno()
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            seen += chunk
            for line in seen.decode(errors="replace").splitlines():
                if "?token=" in line:
                    return line.strip()
    pytest.fail(f"the launcher printed no URL; it printed: {seen[-2000:]!r}")


# The launcher with its first-view preparer replaced by a process that waits until it is stopped, so
# the test sees it running whatever the machine's speed (the real one is tests/test_cold_start.py's).
LAUNCHER = """
import sys
from dspark_lab.cli import launch
launch.prepare_argv = lambda python: [python, "-c", "import time; time.sleep(3600)"]
sys.exit(launch.main(sys.argv[1:]))
"""


def _children(pid: int) -> list[int]:
    return [int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat")
            if (fields := _stat(stat)) and int(fields[1]) == pid]


@pytest.fixture
def launched(tmp_path):
    fake = tmp_path / "fake" / "jupyterlab"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(FAKE_SERVER)
    info = tmp_path / "server.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), str(REPO)]), launch.NO_BROWSER_ENV: "1",
           "FAKE_SERVER_INFO": str(info)}
    env.pop(launch.TOKEN_ENV, None)
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, "--log", str(tmp_path / "lab.log")],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        url = _url_line(proc)
        server = json.loads(info.read_text())
        server["others"] = [c for c in _children(proc.pid) if c != server["pid"]]
        yield proc, url, server
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(WAIT_S)


def test_case6_the_token_is_in_the_servers_environment_not_on_its_command_line(launched):
    proc, url, server = launched
    token = url.rsplit("?token=", 1)[1]
    cmdline = Path(f"/proc/{server['pid']}/cmdline").read_bytes()
    assert token.encode() not in cmdline and all(token not in a for a in server["argv"])
    environ = Path(f"/proc/{server['pid']}/environ").read_bytes().split(b"\0")
    assert f"{launch.TOKEN_ENV}={token}".encode() in environ
    assert "--IdentityProvider.token" not in " ".join(launch.jupyter_argv("py", port=8123, token=token, as_root=False))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL],
                         ids=lambda s: signal.Signals(s).name)
def test_case6_the_server_dies_with_its_launcher(launched, sig):
    proc, url, server = launched
    assert not _gone(server["pid"])
    proc.send_signal(sig)
    code = proc.wait(WAIT_S)
    assert code == (-signal.SIGKILL if sig == signal.SIGKILL else 0)
    _wait_for(f"the server's exit after {signal.Signals(sig).name} to its launcher", lambda: _gone(server["pid"]))
    preparer, = server["others"]  # started beside the server, still waiting when the signal came
    _wait_for(f"the first-view preparer's exit after {signal.Signals(sig).name}", lambda: _gone(preparer))
