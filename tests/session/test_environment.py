"""Commands never wait on a person, with real processes: git without a message, a long git log, vi and git over
https fail or finish at once instead of waiting; commands have no controlling terminal and stdin is /dev/null;
the user's explicit settings win. How the environment is built is tests/unit/test_environment_table.py."""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from peon.client.config import load_config

WAITS_FOREVER = "sleep 300"  # an "editor" or "pager" that would hold a command until its deadline


# -- real commands ---------------------------------------------------------------------------------------


def git(repo: Path, *args: str, env: dict | None = None) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", **(env or {})}).stdout


@pytest.fixture
def repo(workspace) -> Path:
    git(workspace, "init", "-q", "-b", "main")
    git(workspace, "config", "user.email", "peon@example.invalid")
    git(workspace, "config", "user.name", "Peon Test")
    git(workspace, "config", "core.editor", WAITS_FOREVER)  # even the repository's own editor setting
    git(workspace, "config", "core.pager", WAITS_FOREVER)
    return workspace


def waiting_env() -> dict:
    """An inherited environment whose every editor and pager would wait forever."""
    return {name: WAITS_FOREVER for name in ("EDITOR", "VISUAL", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "PAGER",
                                             "GIT_PAGER", "MANPAGER")} | {"GIT_CONFIG_GLOBAL": "/dev/null"}


def test_git_commit_without_a_message_fails_at_once_and_leaves_no_lock(open_session, repo):
    (repo / "file.txt").write_text("content\n")
    git(repo, "add", "file.txt")
    session = open_session(env=waiting_env())
    started = time.monotonic()
    r = session.call("bash", {"command": "git commit", "timeout_seconds": 60})
    elapsed = time.monotonic() - started
    assert r.ok, r.error
    assert elapsed < 5, f"git commit waited {elapsed:.1f} s"  # a hang guard: it would wait 60 s otherwise
    assert r.value["exit_code"] != 0 and r.value["timed_out"] is False
    assert "problem with the editor 'false'" in r.value["output"] and "-m or -F" in r.value["output"]
    assert not (repo / ".git" / "index.lock").exists()
    assert git(repo, "status", "--porcelain") == "A  file.txt\n"  # staged, nothing committed, nothing broken
    r = session.call("bash", {"command": "git commit -q -m 'with a message' && git log --oneline | wc -l"})
    assert r.ok and r.value["exit_code"] == 0 and r.value["output"].strip() == "1"


def test_git_log_of_a_long_history_returns_without_paging(open_session, repo):
    commits = 3000  # far more than a screen: a pager would wait for a keypress
    stream = "".join(f"commit refs/heads/main\ncommitter Peon <p@example.invalid> {1700000000 + i} +0000\n"
                     f"data {len(f'change {i}')}\nchange {i}\n\n" for i in range(commits))
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input=stream, text=True, check=True, timeout=60)
    session = open_session(env=waiting_env())
    started = time.monotonic()
    r = session.call("bash",
                     {"command": "git log --oneline; git -p log --oneline | tail -1; echo \"$PAGER $GIT_PAGER\"",
                              "timeout_seconds": 60})
    assert time.monotonic() - started < 10
    assert r.ok and r.value["exit_code"] == 0 and r.value["timed_out"] is False
    lines = r.value["output"].splitlines()
    assert r.value["output_bytes"] > 30_000 and lines[-2].endswith("change 0") and lines[-1] == "cat cat"


def test_commands_have_no_controlling_terminal_and_stdin_is_dev_null(open_session):
    session = open_session()
    r = session.call("bash", {"command": "tty; (: </dev/tty) 2>/dev/null && echo TTY-OPENED || echo no-tty; "
                                         "readlink /proc/$$/fd/0; cut -d' ' -f7 /proc/$$/stat; "
                                         "[ \"$(cut -d' ' -f6 /proc/$$/stat)\" = $$ ] && echo session-leader"})
    assert r.ok, r.error
    assert r.value["output"].splitlines() == ["not a tty", "no-tty", "/dev/null", "0", "session-leader"]


@pytest.mark.skipif(not shutil.which("vim"), reason="vim is not installed")
def test_vi_run_directly_fails_instead_of_waiting_and_scripted_vim_still_edits(open_session, workspace):
    (workspace / "notes.txt").write_text("hello\n")
    session = open_session(env={"VIMINIT": WAITS_FOREVER})  # an inherited VIMINIT is replaced too
    started = time.monotonic()
    r = session.call("bash", {"command": "vim notes.txt", "timeout_seconds": 60})
    assert r.ok, r.error
    assert r.value["timed_out"] is False and r.value["exit_code"] == 1, r.value
    assert time.monotonic() - started < 30  # a hang guard: it would wait 60 s otherwise
    r = session.call("bash", {"command": "vim +'%s/hello/bye/' +wq notes.txt && vim -es +'%s/bye/ciao/' +wq notes.txt"
                                         " && cat notes.txt", "timeout_seconds": 60})
    assert r.ok and r.value["exit_code"] == 0 and r.value["output"].endswith("ciao\n"), r.value


class _NeedsPassword(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # the stdlib's name
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="peon-test"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_git_over_https_asks_nobody_for_credentials(open_session, repo):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NeedsPassword)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/private.git"
        session = open_session(env={**waiting_env(), "GIT_ASKPASS": WAITS_FOREVER, "SSH_ASKPASS": WAITS_FOREVER,
                                    "DISPLAY": ":0"})
        started = time.monotonic()
        r = session.call("bash", {"command": f"git ls-remote {url}", "timeout_seconds": 60})
        assert time.monotonic() - started < 10
        assert r.ok and r.value["exit_code"] != 0 and r.value["timed_out"] is False
        assert "terminal prompts disabled" in r.value["output"]
    finally:
        server.shutdown()
        server.server_close()


def test_the_users_explicit_settings_win(open_session, tmp_path):
    xdg = tmp_path / "xdg"
    (xdg / "peon").mkdir(parents=True)
    (xdg / "peon" / "config.toml").write_text('[environment]\nEDITOR = "true"\nGIT_ASKPASS = false\nMODE = "batch"\n')
    session = open_session(env={"XDG_CONFIG_HOME": str(xdg), "EDITOR": "vim", "GIT_ASKPASS": "/opt/my-askpass",
                                "PATH": f"::.:{os.environ['PATH']}"})
    # PATH as the command received it (a login shell's profile may set its own afterwards).
    r = session.call("bash", {"command": 'printf "%s|" "$EDITOR" "$GIT_ASKPASS" "$MODE" "$VISUAL"; '
                                         "tr '\\0' '\\n' < /proc/$$/environ | grep '^PATH='"})
    assert r.ok
    editor, askpass, mode, visual, path = r.value["output"].split("|")[:5]
    assert (editor, askpass, mode, visual) == ("true", "/opt/my-askpass", "batch", "false")
    assert path == f"PATH={os.environ['PATH']}\n"  # the empty and "." entries are gone


def test_an_empty_environment_stays_empty(workspace, tmp_path):
    """``env={}`` is the session's environment: commands see only the [environment] table's settings,
    nothing of the supervisor's own (which carries the PYTHONPATH Peon adds to start it)."""
    import peon
    from helpers import ALLOW_ALL

    session = peon.Session(workspace, ALLOW_ALL, env={}, state_dir=tmp_path / "state")
    try:
        r = session.call("bash", {"command": "tr '\\0' '\\n' < /proc/$$/environ"})
        assert r.ok, r.error
        names = {line.split("=", 1)[0] for line in r.value["output"].splitlines() if "=" in line}
        table = set(load_config(env={}).config.environment)
        # The sandbox (on by default) points tool caches at its cache directory: those names too.
        from peon.core.environment import CACHE_VARIABLES

        table |= {*CACHE_VARIABLES, "npm_config_update_notifier"}
        assert "PYTHONPATH" not in names, r.value["output"]
        assert names - table <= {"PATH", "HOME", "TMPDIR", "PWD", "SHLVL", "_", "OLDPWD"}, r.value["output"]
    finally:
        session.close()


def test_login_profile_false_runs_bash_c_without_the_profile(open_session, tmp_path):
    """[environment] login_profile = false: bash -c, no profile read; the default reads it (bash -lc)."""
    home = tmp_path / "profile-home"
    home.mkdir()
    (home / ".bash_profile").write_text("export FROM_PROFILE=read\n")
    xdg = tmp_path / "xdg-login"
    (xdg / "peon").mkdir(parents=True)
    (xdg / "peon" / "config.toml").write_text("[environment]\nlogin_profile = false\n")
    command = 'echo "${FROM_PROFILE:-unread} ${BASH_ENV:-none}"'
    env = {"HOME": str(home), "BASH_ENV": str(home / ".bash_profile")}
    clean = open_session(env={**env, "XDG_CONFIG_HOME": str(xdg)})
    r = clean.call("bash", {"command": command})
    assert r.ok and r.value["output"] == "unread none\n", r.value
    login = open_session(env={**env, "XDG_CONFIG_HOME": str(tmp_path / "none")})
    r = login.call("bash", {"command": command})
    assert r.ok and r.value["output"].startswith("read "), r.value
