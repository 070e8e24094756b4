"""``[[hooks]]`` in the configuration: the user's file may declare hooks, checked when loaded; a project's
file that declares one is refused (a project cannot add a program for Peon to run); and the supervisor reads
them back through its plain view."""

from __future__ import annotations

import pytest

from peon.approval.hooks import hook_specs
from peon.client.config import load_config
from peon.core.config_view import ResolvedConfig
from peon.core.errors import ConfigError

GUARD = '[[hooks]]\nevent = "before_call"\nmatcher = "Bash"\ncommand = ["/usr/local/bin/guard", "--strict"]\n'


def layout(tmp_path, user: str = "", project: str | None = None):
    (tmp_path / "home" / "peon").mkdir(parents=True)
    (tmp_path / "home" / "peon" / "config.toml").write_text(user)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    if project is not None:
        (workspace / ".peon").mkdir()
        (workspace / ".peon" / "config.toml").write_text(project)
    return {"env": {"XDG_CONFIG_HOME": str(tmp_path / "home")}, "workspace": workspace}


def test_the_users_hooks_load_and_reach_the_supervisor(tmp_path):
    user = GUARD + '[[hooks]]\nevent = "after_call"\nurl = "http://127.0.0.1:9/note"\ntimeout_seconds = 2.5\n'
    loaded = load_config(**layout(tmp_path, user))
    specs = hook_specs(ResolvedConfig(loaded.to_wire()).config.hooks)
    assert [(s.event, s.matcher, s.command, s.url, s.timeout_seconds, s.name) for s in specs] == [
        ("before_call", "Bash", ("/usr/local/bin/guard", "--strict"), "", 10.0, "hooks[0]"),
        ("after_call", "", (), "http://127.0.0.1:9/note", 2.5, "hooks[1]")]


def test_no_hooks_by_default(tmp_path):
    assert load_config(**layout(tmp_path)).config.hooks == ()


def test_a_project_file_that_declares_a_hook_is_refused(tmp_path):
    with pytest.raises(ConfigError) as raised:
        load_config(**layout(tmp_path, "", GUARD))
    assert "hooks" in str(raised.value) and "project" in str(raised.value)


@pytest.mark.parametrize("hook", [
    '[[hooks]]\nevent = "before_call"\n',
    '[[hooks]]\nevent = "before_call"\ncommand = ["x"]\nurl = "http://127.0.0.1/"\n',
    '[[hooks]]\nevent = "before_call"\ncommand = []\n',
    '[[hooks]]\nevent = "before_call"\ncommand = [""]\n',
    '[[hooks]]\nevent = "during_call"\ncommand = ["x"]\n',
    '[[hooks]]\nevent = "before_call"\nurl = "file:///etc/passwd"\n',
    '[[hooks]]\nevent = "before_call"\ncommand = ["x"]\nmatcher = "Bash("\n',
    '[[hooks]]\nevent = "before_call"\ncommand = ["x"]\ntimeout_seconds = 0\n',
    '[[hooks]]\nevent = "before_call"\ncommand = "x"\n',
])
def test_a_hook_that_cannot_work_refuses_to_load(tmp_path, hook):
    with pytest.raises(ConfigError):
        load_config(**layout(tmp_path, hook))
