"""dspark_lab.cli.launch: the pieces `bash lab.sh` is made of (port, token, JupyterLab argv, URL, banner)."""
from __future__ import annotations

import socket

import pytest

from dspark_lab.cli import launch


def test_free_port_is_the_port_the_os_assigned_and_is_bindable_on_localhost():
    port = launch.free_port()
    assert isinstance(port, int) and 0 < port < 65536  # the assigned port, not the 0 that asks for one
    with socket.socket() as s:
        s.bind((launch.HOST, port))


def test_argv_is_localhost_only_token_on_fixed_port_offline():
    argv = launch.jupyter_argv("py", port=8123, token="abc", as_root=False)
    assert argv[:3] == ["py", "-m", "jupyterlab"]
    assert "--ServerApp.ip=127.0.0.1" in argv and "--ServerApp.port=8123" in argv
    assert "--ServerApp.port_retries=0" in argv  # never silently another port than the URL says
    assert "--no-browser" in argv and not any("abc" in a for a in argv)  # the token: launch.server_env
    assert launch.server_env("abc", {})[launch.TOKEN_ENV] == "abc"
    for opt in launch.OFFLINE_ARGS:
        assert opt in argv
    assert "--allow-root" not in argv
    assert f"--LabApp.default_url=/lab/tree/notebooks/{launch.START_NOTEBOOK}" in argv


def test_extra_jupyter_options_come_last():
    argv = launch.jupyter_argv("py", port=8123, token="abc", as_root=False, extra=["--LabApp.expose_app_in_browser=True"])
    assert argv[-1] == "--LabApp.expose_app_in_browser=True"


def test_argv_as_root_adds_allow_root():
    assert "--allow-root" in launch.jupyter_argv("py", port=8123, token="abc", as_root=True)


@pytest.mark.parametrize("kw,field", [({"port": 0, "token": "t"}, "port"), ({"port": 70000, "token": "t"}, "port"),
                                      ({"port": 8000, "token": ""}, "token")])
def test_argv_rejects_bad_input(kw, field):
    with pytest.raises(ValueError, match=field):
        launch.jupyter_argv("py", **kw)


def test_url_opens_the_notebook_with_the_token():
    assert launch.lab_url(8123, "abc") == f"http://127.0.0.1:8123/lab/tree/notebooks/{launch.START_NOTEBOOK}?token=abc"
    with pytest.raises(ValueError, match="notebook"):
        launch.lab_url(8123, "abc", notebook="nope.ipynb")


def test_every_listed_notebook_exists_and_the_banner_names_each_once(tmp_path):
    for name, _ in launch.NOTEBOOKS:
        assert (launch.ROOT / "notebooks" / name).is_file(), name
    assert [n for n, _ in launch.NOTEBOOKS] == sorted(p.name for p in (launch.ROOT / "notebooks").glob("*.ipynb")), \
        "the banner lists every notebook, in order"
    text = launch.banner("http://127.0.0.1:1/lab?token=x", tmp_path / "log", as_root=True)
    assert text.count("http://") == 1 and "--allow-root" in text and str(tmp_path / "log") in text
    for name, what in launch.NOTEBOOKS:
        assert sum(name in line for line in text.splitlines()) == 1 and what in text
    assert "--allow-root" not in launch.banner("u", tmp_path / "log", as_root=False)


@pytest.mark.parametrize("env,want", [({launch.NO_BROWSER_ENV: "1", "DISPLAY": ":0"}, False),
                                      ({"DISPLAY": ":0"}, True), ({}, None)])
def test_browser_opens_only_where_it_can_show(env, want, monkeypatch):
    monkeypatch.setattr(launch.sys, "platform", "linux")
    assert launch.should_open_browser(env) is bool(want)
