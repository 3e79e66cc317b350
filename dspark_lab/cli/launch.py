"""`bash lab.sh`: JupyterLab on notebook 01, on this machine only, behind a token.

What it does, and why:
  - listens on 127.0.0.1 only, on a free port, with a random token: the kernel runs code as you;
  - as root (a container, a rented GPU box) it adds --allow-root, which JupyterLab refuses to start
    without, and says so;
  - never goes to the network from the server (no update check, no news feed, no extension listing),
    so it starts the same on an offline or firewalled machine;
  - no "get notified about official Jupyter news?" toast over every notebook: the announcements
    plugin is disabled in a config folder of the kit's own (out/jupyter-config, put first on
    JUPYTER_CONFIG_PATH); the user's own Jupyter config is never written, and a user whose config
    names that plugin keeps their choice (the kit's folder is then left out);
  - beside the server it stores the recorded panel's first view where none is stored for these runs
    and this code (views/first_view.py, in a process of its own that ends when done, or with the
    launcher), so notebook 01's first cell shows it at once, the first time too;
  - Jupyter's own log goes to a file (printed), so the terminal shows one URL and what each notebook is for;
  - Ctrl-C (SIGINT), SIGTERM or SIGHUP (an ssh drop, a closed terminal) stops the server, its
    kernels included, and exits 0;
  - the token goes to the server through its environment (JUPYTER_TOKEN, the ecosystem's way), never
    on its command line, which every local user can read in `ps`;
  - the server dies with this launcher even when the launcher is killed outright (SIGKILL): it asks
    the kernel for SIGTERM when its parent dies (Linux prctl PR_SET_PDEATHSIG), so Jupyter still
    shuts its kernels down, and each kernel exits when the server is gone (ipykernel watches its
    parent, JPY_PARENT_PID).

The server runs in a session of its own, so the terminal's Ctrl-C reaches this launcher only, which
shuts the server down (Jupyter itself would ask "Shutdown this Jupyter server (y/[n])?" on a tty).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import webbrowser
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parents[2]
HOST = "127.0.0.1"
NO_BROWSER_ENV = "DSPARK_NO_BROWSER"  # "1": print the URL, open no browser (CI, ssh sessions)
NOTEBOOK_DIR = "notebooks"
# (file, what it is for): printed by `bash lab.sh`, one line each.
NOTEBOOKS = (
    ("01_onboarding.ipynb", "start here: why torch.tensor(n, device=...) stalls the host, and the fixes, "
                            "with a panel over the recorded runs"),
    ("02_tuning_new_gpu.ipynb", "on a new GPU: fingerprint, pageable-copy probe and a small sweep of this "
                                "machine, compared with the recorded GPUs"),
    ("03_design_review.ipynb", "for a design review: recorded runs side by side, slide-ready figures, "
                               "the standalone HTML report"),
    ("04_sync_gallery.ipynb", "real sync pitfalls from public PRs, each beside its fix, measured: syncs that "
                              "cost and syncs that cost nothing here; the hazards as they happened"),
    ("05_your_own_code.ipynb", "your own step: where it syncs and what each sync costs, the guard, a "
                               "before/after diff for a PR, and katas on the gallery's cases"),
    ("06_investigation.ipynb", "a worked investigation, \"the decode step got slower on the new GPU\": "
                               "inspect, read the cost per line, fix the sync that matters, prove it, guard it"),
)
START_NOTEBOOK = NOTEBOOKS[0][0]
TOKEN_ENV = "JUPYTER_TOKEN"  # read by jupyter_server's IdentityProvider
PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
# JupyterLab options that keep the server off the network (see the module docstring).
OFFLINE_ARGS = (
    "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    "--LabApp.extension_manager=readonly",
    "--LabApp.news_url=None",
)
# The kit's notebooks saved stripped, as git stores them, so `git status` stays truthful (notebook_save).
SAVE_ARGS = ("--ContentsManager.pre_save_hook=dspark_lab.cli.notebook_save.strip_before_save",)


# The kit's own Jupyter config folder (written at each start, never the user's) and what it holds.
KIT_CONFIG_DIR = ROOT / "out" / "jupyter-config"
NEWS_PLUGIN = "@jupyterlab/apputils-extension:announcements"
KIT_PAGE_CONFIG = {"disabledExtensions": {NEWS_PLUGIN: True}}


def users_own_choice(config_dirs: Sequence[str]) -> Optional[Path]:
    """The first labconfig/page_config.json among `config_dirs` that names the news plugin, if any."""
    for d in config_dirs:
        f = Path(d) / "labconfig" / "page_config.json"
        try:
            if NEWS_PLUGIN in json.loads(f.read_text()).get("disabledExtensions", {}):
                return f
        except (OSError, ValueError, AttributeError):
            continue
    return None


def kit_config_env(base, kit_dir: Path = KIT_CONFIG_DIR) -> dict:
    """JUPYTER_CONFIG_PATH with the kit's folder first (written here), unless the user's own config
    already decides about the news plugin; the user's JUPYTER_CONFIG_PATH entries are kept after it."""
    from unittest import mock

    from jupyter_core.paths import jupyter_config_path

    with mock.patch.dict(os.environ, base, clear=True):  # the folders the server will search
        searched = jupyter_config_path()
    if users_own_choice([d for d in searched if Path(d) != kit_dir]) is not None:
        return {}
    (kit_dir / "labconfig").mkdir(parents=True, exist_ok=True)
    (kit_dir / "labconfig" / "page_config.json").write_text(json.dumps(KIT_PAGE_CONFIG, indent=1) + "\n")
    rest = [p for p in base.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p and Path(p) != kit_dir]
    return {"JUPYTER_CONFIG_PATH": os.pathsep.join([str(kit_dir), *rest])}


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def free_port(host: str = HOST) -> int:
    """A port the OS says is free on `host` now (the server is started with port_retries=0, so a race
    shows as an error rather than a silent other port)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def new_token() -> str:
    return secrets.token_hex(24)


def notebook_path(name: str = START_NOTEBOOK) -> str:
    """The URL path of a notebook under the server's root (the repository)."""
    known = [n for n, _ in NOTEBOOKS]
    if name not in known:
        raise ValueError(f"notebook {name!r} is not one of the kit's notebooks: {', '.join(known)}")
    return f"{NOTEBOOK_DIR}/{name}"


def lab_url(port: int, token: str, notebook: str = START_NOTEBOOK, host: str = HOST) -> str:
    return f"http://{host}:{port}/lab/tree/{notebook_path(notebook)}?token={token}"


def jupyter_argv(python: str, *, port: int, token: str, root: Path = ROOT, notebook: str = START_NOTEBOOK,
                 as_root: Optional[bool] = None, extra: Sequence[str] = ()) -> list[str]:
    """The JupyterLab command line: localhost, this port only, no browser (we open it once the server
    answers), offline, --allow-root where needed. The token is not on it: see server_env."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"port must be in 1..65535, got {port!r}")
    if not token:
        raise ValueError("token must be a non-empty string")
    argv = [python, "-m", "jupyterlab", "--no-browser", f"--ServerApp.ip={HOST}", f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}",
            f"--LabApp.default_url=/lab/tree/{notebook_path(notebook)}", *OFFLINE_ARGS, *SAVE_ARGS]
    if is_root() if as_root is None else as_root:
        argv.append("--allow-root")
    return argv + list(extra)


def server_env(token: str, base=None) -> dict:
    """The server's environment: ours plus the token (an environment is readable by its owner only,
    /proc/PID/environ is mode 0400, where a command line is readable by every user)."""
    if not token:
        raise ValueError("token must be a non-empty string")
    return {**(os.environ if base is None else base), TOKEN_ENV: token}


def lab_env(token: str, base=None, kit_dir: Path = KIT_CONFIG_DIR) -> dict:
    """The server's environment as `bash lab.sh` starts it: server_env plus the kit's Jupyter config."""
    env = server_env(token, base)
    return {**env, **kit_config_env(env, kit_dir)}


def prepare_argv(python: str) -> list[str]:
    """The process that stores the recorded panel's first view beside the server (views/first_view.py)."""
    return [python, "-m", "dspark_lab.views.first_view"]


def _die_with_launcher(launcher_pid: int):
    """A preexec function for the server and the first-view preparer: SIGTERM to it when this launcher
    dies, however it dies (Linux; elsewhere the launcher's own handlers are all there is)."""
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None

    def preexec() -> None:
        os.setsid()  # a session of its own: the terminal's Ctrl-C reaches the launcher only
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != launcher_pid:  # the launcher died before prctl took effect
                os._exit(1)

    return preexec


def banner(url: str, log: Path, as_root: bool) -> str:
    """What `bash lab.sh` prints once the server answers: one URL, the notebooks, how to stop, the rest."""
    lines = []
    if as_root:
        lines.append("running as root: JupyterLab is started with --allow-root (it refuses root without it)")
    lines += ["", "dspark-lab is running. Open this URL (this machine only; the token is the password):",
              "", f"    {url}", "", "Notebooks (in the left file browser, under notebooks/):"]
    width = max(len(n) for n, _ in NOTEBOOKS)
    lines += [f"  {n:<{width}}  {what}" for n, what in NOTEBOOKS]
    lines += ["", f"Jupyter's log: {log}",
              "Ctrl-C stops the server. Other jobs: `bash lab.sh report` (report from the recorded runs), "
              "`bash lab.sh sweep` (sweep this machine's GPU, then report), `bash lab.sh cli --help` (the dspark-lab CLI).",
              ""]
    return "\n".join(lines)


def _answers(port: int, token: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/api/status?token={token}", timeout=2) as r:
            json.loads(r.read().decode() or "null")
            return r.status == 200
    except (OSError, ValueError):
        return False


def _stop(proc: subprocess.Popen) -> int:
    """SIGTERM: Jupyter shuts its kernels down and exits; SIGKILL of its process group if it hangs."""
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            return proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.wait()


def should_open_browser(env=os.environ) -> bool:
    """Open a browser only where one can show: not asked off, and a display (or macOS/Windows)."""
    if env.get(NO_BROWSER_ENV, "") not in ("", "0"):
        return False
    return sys.platform in ("darwin", "win32") or bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def _wait_until_answering(proc: subprocess.Popen, port: int, token: str, log: Path, stop: dict) -> bool:
    """Wait for the server to answer (or a stop signal); False, with the reason printed, when it
    exited first or did not answer in time."""
    t0 = time.monotonic()
    while not _answers(port, token):
        if stop["signal"] is not None:
            return True
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            print(f"JupyterLab exited ({proc.returncode}) before answering; the end of {log}:\n{tail}",
                  file=sys.stderr)
            return False
        if time.monotonic() - t0 > START_TIMEOUT_S:
            print(f"JupyterLab did not answer within {START_TIMEOUT_S:.0f} s; see {log}", file=sys.stderr)
            _stop(proc)
            return False
        time.sleep(0.25)
    return True


def run(python: str = sys.executable, *, port: Optional[int] = None, log: Optional[Path] = None,
        notebook: str = START_NOTEBOOK, extra: Sequence[str] = (), out=sys.stdout) -> int:
    port = port or free_port()
    token = new_token()
    log = Path(log or ROOT / "out" / "jupyterlab.log")
    log.parent.mkdir(parents=True, exist_ok=True)
    as_root = is_root()
    argv = jupyter_argv(python, port=port, token=token, notebook=notebook, as_root=as_root, extra=extra)
    print(f"starting JupyterLab on {HOST}:{port} (log: {log}) …", file=sys.stderr, flush=True)
    stop = {"signal": None}

    def on_signal(signum, _frame):
        stop["signal"] = signum

    old = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    with open(log, "ab") as logf:
        proc = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                env=lab_env(token), preexec_fn=_die_with_launcher(os.getpid()))
        # Without the token: it serves nothing, it only draws and stores the view.
        prep = subprocess.Popen(prepare_argv(python), cwd=ROOT, stdin=subprocess.DEVNULL, stdout=logf,
                                stderr=subprocess.STDOUT, preexec_fn=_die_with_launcher(os.getpid()))
        try:
            if not _wait_until_answering(proc, port, token, log, stop):
                return 1
            if stop["signal"] is None:
                url = lab_url(port, token, notebook)
                print(banner(url, log, as_root), file=out, flush=True)
                if should_open_browser():
                    webbrowser.open(url)
            while stop["signal"] is None and proc.poll() is None:
                time.sleep(0.2)
        finally:
            if proc.poll() is None:
                print("\nstopping JupyterLab …", file=sys.stderr, flush=True)
            _stop(prep)
            rc = _stop(proc)
            for s, h in old.items():
                signal.signal(s, h)
    if stop["signal"] is not None:
        print("JupyterLab stopped.", file=sys.stderr)
        return 0
    print(f"JupyterLab exited by itself ({rc}); see {log}", file=sys.stderr)
    return 0 if rc == 0 else 1


def port_number(text: str) -> int:
    """--port: an integer 1..65535 (argparse says which option was wrong)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to 65535; got {text!r:.40}")
    return port


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="bash lab.sh", description="Open the dspark-lab notebooks in JupyterLab "
                                "(127.0.0.1 only, token on, a free port).")
    p.add_argument("--port", type=port_number, default=None, help="port to listen on, 1 to 65535 (default: a free one)")
    p.add_argument("--notebook", default=START_NOTEBOOK, choices=[n for n, _ in NOTEBOOKS],
                   help="notebook to open first")
    p.add_argument("--log", type=Path, default=None, help="Jupyter's log file (default: out/jupyterlab.log)")
    p.add_argument("jupyter_args", nargs="*", metavar="-- JUPYTER_OPTION",
                   help="after --: more JupyterLab options (e.g. -- --LabApp.expose_app_in_browser=True)")
    args = p.parse_args(argv)
    return run(port=args.port, log=args.log, notebook=args.notebook, extra=args.jupyter_args)


if __name__ == "__main__":
    sys.exit(main())
