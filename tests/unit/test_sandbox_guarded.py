"""The agent-control paths as the sandbox guards them, without a process: which paths beneath a writable
directory (the list's, git's redirections, each submodule's), which directories hold them, what a command
may leave there (a repository ``git init`` made; a config of inert keys), and the ledger of one call —
what was there when the command started, and what it left being moved into the state directory (or kept),
with read-only binds (only what was absent is judged) and with Landlock alone (``deep``: what was replaced
or changed too). The commands themselves, in real sandboxes, are tests/session/test_sandbox_guarded_paths.py."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from peon.workers.sandbox import guarded
from peon.workers.sandbox.ledger import Ledger

LIST = (".git/hooks", ".git/config", ".gitmodules", ".claude", ".mcp.json", ".github/workflows", ".vscode")
GIT_INIT_CONFIG = (b"[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"
                   b"\tlogallrefupdates = true\n[remote \"origin\"]\n\turl = ../origin\n"
                   b"\tfetch = +refs/heads/*:refs/remotes/origin/*\n[branch \"main\"]\n\tremote = origin\n"
                   b"\tmerge = refs/heads/main\n[user]\n\temail = agent@example.test\n")
SAMPLES = ("pre-commit.sample", "commit-msg.sample")


def test_the_guarded_paths_are_the_lists_and_gits_own():
    got = guarded.candidates("/ws", (".claude", ".git/hooks"), ["/ws/.git/modules/lib/a"])
    assert got[:2] == ["/ws/.claude", "/ws/.git/hooks"]
    for name in ("", "/config", "/commondir", "/info", "/config.worktree", "/objects/info/alternates", "/worktrees"):
        assert f"/ws/.git{name}" in got and f"/ws/.git/modules/lib/a{name}" in got
    assert "/ws/.git/modules" not in got
    assert "/ws/.git/modules" in guarded.candidates("/ws", (".git/hooks",), all_modules=True)
    assert guarded.candidates("/ws", (".claude",)) == ["/ws/.claude"]  # no .git on the list: none of git's


def test_the_containers_lie_between_the_writable_root_and_each_guarded_path():
    got = guarded.containers(["/ws/.git/config", "/ws/.git/hooks", "/ws/.github/workflows", "/ws/.claude",
                              "/tmp/t/.git/config", "/ws/a/b/.claude/x", "/ws/a/b/.claude"], ["/ws", "/tmp", "/tmp/t"])
    # shallowest first; never a root, never a guarded path or anything beneath one
    assert got == ["/ws/.git", "/ws/.github", "/ws/a", "/tmp/t/.git", "/ws/a/b"]


@pytest.mark.parametrize("text, keys", [
    (GIT_INIT_CONFIG, ["core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
                       "remote.origin.url", "remote.origin.fetch", "branch.main.remote", "branch.main.merge",
                       "user.email"]),
    (b"# c\n[Core]\n  Bare\n; c\n[submodule \"a/b\"] # c\n\turl=x\n", ["core.bare", "submodule.a/b.url"]),
    (b"[core] fsmonitor = touch x\n", None),  # a key after the header: git reads it
    (b"[core]\n\tpager = a \\\n[user]\n", None),  # a continuation: the next line is a value
    (b"[remote.origin]\n\turl = x\n", None),  # the old subsection syntax
    (b"[core]\n\tpager = \"less\"\n", None),
    (b"\xef\xbb\xbf[core]\n", None),  # a byte-order mark, which git skips
    (b"[core]\n\tbare = \xff\n", None),
    (b"bare = true\n", None),  # a key before any section
    (b"[core\n", None),
])
def test_git_config_keys_are_read_as_git_reads_them_or_not_at_all(text, keys):
    assert guarded.git_config_keys(text) == keys


def test_what_may_stay_runs_nothing():
    gitdirs = ["/ws/.git", "/ws/.git/modules/a"]
    assert guarded.inert("/ws/.git", gitdirs, "dir")
    assert not guarded.inert("/ws/.git", gitdirs, "file")  # a gitdir: file leads git elsewhere
    assert not guarded.inert("/ws/.git", gitdirs, "link")
    assert guarded.inert("/ws/.git/config", gitdirs, "file", content=GIT_INIT_CONFIG)
    assert guarded.inert("/ws/.git/modules/a/config", gitdirs, "file",
                         content=b"[core]\n\tworktree = ../../../a\n\tbare = false\n")
    for bad in (b"[core]\n\tfsmonitor = touch /tmp/owned\n", b"[core]\n\thooksPath = /tmp\n",
                b"[include]\n\tpath = /tmp/x\n", b"[alias]\n\tst = !sh\n", b"[remote \"o\"]\n\tuploadpack = sh\n",
                b"[core]\n\tpager = sh\n", b"[diff \"x\"]\n\ttextconv = sh\n", b"[filter \"x\"]\n\tclean = sh\n"):
        assert not guarded.inert("/ws/.git/config", gitdirs, "file", content=bad), bad
    assert not guarded.inert("/ws/.git/config", gitdirs, "link", content=GIT_INIT_CONFIG)
    assert guarded.inert("/ws/.git/hooks", gitdirs, "dir", [(n, "file") for n in SAMPLES])
    assert not guarded.inert("/ws/.git/hooks", gitdirs, "dir", [("pre-commit", "file")])
    assert not guarded.inert("/ws/.git/hooks", gitdirs, "dir", [("x.sample", "link")])
    assert guarded.inert("/ws/.git/info", gitdirs, "dir", [("exclude", "file")])
    assert not guarded.inert("/ws/.git/info", gitdirs, "dir", [("attributes", "file")])
    for path in ("/ws/.git/commondir", "/ws/.git/config.worktree", "/ws/.git/worktrees", "/ws/.mcp.json",
                 "/ws/.git/objects/info/alternates", "/ws/.git/modules/a/hooks/post-checkout"):
        assert not guarded.inert(path, gitdirs, "file"), path


# -- the ledger of one call ------------------------------------------------------------------------


def _repository(git: Path, config: bytes = GIT_INIT_CONFIG, hooks: tuple[str, ...] = SAMPLES) -> None:
    for directory in ("objects/info", "refs/heads", "hooks", "info"):
        (git / directory).mkdir(parents=True, exist_ok=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_bytes(config)
    (git / "info" / "exclude").write_text("")
    for hook in hooks:
        (git / "hooks" / hook).write_text("#!/bin/sh\n")


@pytest.fixture
def box(tmp_path):
    ws, state = tmp_path / "ws", tmp_path / "state"
    ws.mkdir()
    state.mkdir()
    return ws, state


def _settle(ledger: Ledger, state: Path) -> dict[str, str]:
    return {entry["path"]: next(k for k in entry if k != "path") for entry in ledger.settle(state, "call-1")}


def test_with_read_only_binds_what_was_absent_and_is_there_now_is_set_aside(box):
    ws, state = box
    _repository(ws / ".git")
    (ws / ".vscode").mkdir()
    ledger = Ledger.take([str(ws), "/dev/null"], LIST, deep=False)
    assert set(ledger.read_only()) == {f"{ws}/.git/hooks", f"{ws}/.git/config", f"{ws}/.git/info", f"{ws}/.vscode"}
    assert ledger.containers() == [f"{ws}/.git"]  # the repository's directory: git writes there, but it stays put
    # What a command leaves:
    (ws / ".mcp.json").write_text("{}")
    (ws / ".git" / "commondir").write_text("/tmp/elsewhere\n")
    (ws / ".claude").mkdir()
    (ws / ".claude" / "settings.json").write_text("{}")
    (ws / ".github" / "workflows").mkdir(parents=True)
    (ws / ".github" / "workflows" / "x.yml").write_text("on: push\n")
    (ws / ".git" / "objects" / "info" / "alternates").write_text("/tmp/objects\n")
    (ws / "README").write_text("mine\n")
    got = _settle(ledger, state)
    assert got == {f"{ws}/{p}": "moved_to" for p in (".claude", ".mcp.json", ".git/commondir", ".github/workflows",
                                                      ".git/objects/info/alternates")}, got
    kept = state / "set-aside" / "call-1" / str(ws).lstrip("/")
    assert (kept / ".claude" / "settings.json").read_text() == "{}" and (kept / ".mcp.json").exists()
    assert not (ws / ".mcp.json").exists() and not (ws / ".claude").exists() and (ws / ".github").is_dir()
    assert (ws / "README").exists() and (ws / ".git" / "config").read_bytes() == GIT_INIT_CONFIG
    assert ledger.settle(state, "call-1") == ledger.settled  # once


def test_a_repository_a_command_made_stays_unless_it_runs_something(box):
    ws, state = box
    ledger = Ledger.take([str(ws)], LIST, deep=False)
    assert ledger.read_only() == [] and ledger.containers() == []
    _repository(ws / ".git")  # as git init, remote add and a commit leave it
    assert _settle(ledger, state) == {}
    (ws / ".git2").mkdir()
    ledger = Ledger.take([str(ws / ".git2")], LIST, deep=False)
    _repository(ws / ".git2" / ".git", config=GIT_INIT_CONFIG + b"[core]\n\tfsmonitor = touch /tmp/owned\n",
                hooks=(*SAMPLES, "pre-commit"))
    assert _settle(ledger, state) == {f"{ws}/.git2/.git/config": "moved_to", f"{ws}/.git2/.git/hooks": "moved_to"}


def test_git_cannot_be_made_a_file_or_a_link(box):
    ws, state = box
    elsewhere = ws.parent / "elsewhere"
    _repository(elsewhere)
    ledger = Ledger.take([str(ws)], LIST, deep=False)
    (ws / ".git").write_text(f"gitdir: {elsewhere}\n")
    (ws / ".github").symlink_to(elsewhere)  # a link on the way to a guarded path
    assert _settle(ledger, state) == {f"{ws}/.git": "moved_to", f"{ws}/.github": "moved_to"}
    assert not os.path.lexists(ws / ".git") and not os.path.lexists(ws / ".github")


def test_a_submodule_directory_is_guarded_as_the_repository_is(box):
    ws, state = box
    _repository(ws / ".git")
    _repository(ws / ".git" / "modules" / "libs" / "a", config=b"[core]\n\tworktree = ../../../../libs/a\n")
    ledger = Ledger.take([str(ws)], LIST, deep=False)
    assert {f"{ws}/.git/modules/libs/a/config", f"{ws}/.git/modules/libs/a/hooks"} <= set(ledger.read_only())
    assert f"{ws}/.git/modules/libs/a" in ledger.containers()
    (ws / ".git" / "modules" / "libs" / "a" / "commondir").write_text("/tmp\n")
    _repository(ws / ".git" / "modules" / "b", config=b"[core]\n\tpager = touch /tmp/owned\n")  # made by the command
    assert _settle(ledger, state) == {f"{ws}/.git/modules/b/config": "moved_to",
                                      f"{ws}/.git/modules/libs/a/commondir": "moved_to"}


def test_with_landlock_alone_what_was_replaced_or_changed_is_set_aside_too(box):
    ws, state = box
    _repository(ws / ".git")
    (ws / ".claude").mkdir()
    (ws / ".claude" / "settings.json").write_text("{}")
    (ws / ".claude" / "notes.md").write_text("mine")
    ledger = Ledger.take([str(ws)], LIST, deep=True)
    with open(ws / ".git" / "config", "ab") as config:  # changed in place: same inode, new ctime
        config.write(b"[core]\n\tfsmonitor = touch /tmp/owned\n")
    (ws / ".git" / "hooks" / "post-checkout").write_text("#!/bin/sh\n")
    (ws / ".claude" / "settings.json").write_text('{"hooks": {}}')
    got = _settle(ledger, state)
    assert got == {f"{ws}/.git/config": "moved_to", f"{ws}/.git/hooks/post-checkout": "moved_to",
                   f"{ws}/.claude/settings.json": "moved_to"}, got
    assert (ws / ".claude" / "notes.md").read_text() == "mine" and (ws / ".git" / "hooks" / SAMPLES[0]).exists()
    # git config rewriting the file with inert keys only (a new inode): it stays.
    _repository(ws / ".git")
    ledger = Ledger.take([str(ws)], LIST, deep=True)
    (ws / ".git" / "config.lock").write_bytes(GIT_INIT_CONFIG + b"[user]\n\tname = Agent\n")
    os.replace(ws / ".git" / "config.lock", ws / ".git" / "config")
    assert _settle(ledger, state) == {}
    # .git renamed aside and built again: what is new in it is judged like anything made.
    ledger = Ledger.take([str(ws)], LIST, deep=True)
    os.rename(ws / ".git", ws / "old-git")
    _repository(ws / ".git", config=b"[core]\n\tfsmonitor = touch /tmp/owned\n")
    assert _settle(ledger, state) == {f"{ws}/.git/config": "moved_to"}


def test_across_file_systems_it_is_copied_then_removed_and_beyond_bounds_removed(box, monkeypatch):
    ws, _ = box
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(ws).st_dev:
        pytest.skip("needs /dev/shm on another file system than the test's temp dir")
    with tempfile.TemporaryDirectory(dir=shm) as other:
        ledger = Ledger.take([str(ws)], LIST, deep=False)
        (ws / ".claude" / "agents").mkdir(parents=True)
        (ws / ".claude" / "agents" / "a.md").write_text("steer")
        (ws / ".claude" / "link").symlink_to("/etc/passwd")
        got = ledger.settle(other, "c/../2")
        [entry] = got
        assert entry["path"] == f"{ws}/.claude" and entry["moved_to"].startswith(f"{other}/set-aside/c_.._2/")
        assert Path(entry["moved_to"], "agents", "a.md").read_text() == "steer"
        assert os.readlink(Path(entry["moved_to"], "link")) == "/etc/passwd"
        assert not (ws / ".claude").exists()
        from peon.workers.sandbox import ledger as ledger_module

        monkeypatch.setattr(ledger_module, "COPY_BYTES", 3)
        ledger = Ledger.take([str(ws)], LIST, deep=False)
        (ws / ".mcp.json").write_text("{...}")
        assert ledger.settle(other, "3") == [{"path": f"{ws}/.mcp.json",
                                              "removed": "another file system, and too large to keep"}]
        assert not (ws / ".mcp.json").exists()


def test_doctor_says_what_each_mode_enforces_at_the_agent_control_paths():
    from peon.workers.sandbox.plan import SandboxPlan, enforced

    def lines(**kind) -> str:
        kind = {"kind": "landlock", "abi": 7, **kind}
        plan = SandboxPlan(kind.pop("kind"), ("/ws",), ("/",), False, True, True, protected=LIST, seccomp=True, **kind)
        return "\n".join(enforced(plan))

    for text in (lines(mount_view=True), lines(kind="bwrap", abi=0)):
        assert "that exist when a command starts are read-only" in text and "EBUSY" in text
        assert "commondir" in text and "creates at an agent-control path that did not exist" in text
        assert "sandbox.set_aside" in text
    alone = lines()
    assert "read-only" not in alone and "creates, replaces or changes" in alone and "writable (Landlock alone)" in alone
    plain = SandboxPlan("landlock", ("/ws",), ("/",), False, True, True, abi=7, protected=(".claude",))
    assert "commondir" not in "\n".join(enforced(plain))  # git's own only when the list names .git
