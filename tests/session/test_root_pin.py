"""The workspace is pinned when the session starts: renaming it and putting a symlink in its place
redirects no ``read`` or ``write`` — they act on the renamed original (or fail), never on the link's
target. The target here is a directory of our own holding a file named like the machine's
``/etc/hostname`` (the real one is never touched)."""

from __future__ import annotations

import hashlib

import psutil

from helpers import wait_for

HOSTNAME = "hostname"


def test_a_renamed_workspace_replaced_by_a_symlink_redirects_nothing(fs_session, workspace, tmp_path):
    (workspace / HOSTNAME).write_text("original\n")
    assert fs_session.call("read", {"path": HOSTNAME}).value["content"] == "original\n"

    target = tmp_path / "etc"
    target.mkdir()
    (target / HOSTNAME).write_text("target\n")
    moved = tmp_path / "moved"
    workspace.rename(moved)
    workspace.symlink_to(target, target_is_directory=True)

    read = fs_session.call("read", {"path": HOSTNAME})
    assert not read.ok or read.value["content"] == "original\n", read
    assert read.ok, read  # the pinned root still names the original directory

    written = fs_session.call("write", {"path": HOSTNAME, "content": "rewritten\n", "mode": "replace"})
    assert written.ok, written
    assert (moved / HOSTNAME).read_text() == "rewritten\n"
    assert (target / HOSTNAME).read_text() == "target\n"

    created = fs_session.call("write", {"path": "new.txt", "content": "new\n", "mode": "create"})
    assert created.ok, created
    assert (moved / "new.txt").read_text() == "new\n" and not (target / "new.txt").exists()
    assert written.value["sha256"] == hashlib.sha256(b"rewritten\n").hexdigest()


def test_the_sessions_processes_work_in_the_root_directory_not_the_workspace(fs_session, workspace):
    """``multiprocessing`` starts each forkserver and worker by ``chdir`` to its parent's working
    directory by path: in the workspace, a worker starting while the workspace was renamed failed (and
    one starting after a symlink took its place went through it). The supervisor, its forkserver and
    its workers work in ``/``; commands still start in the workspace."""
    (workspace / "a.txt").write_text("a\n")
    assert fs_session.call("read", {"path": "a.txt"}).ok
    supervisor = psutil.Process(fs_session.info["pid"])
    cwds: dict[str, str] = {}
    roles = {"peon-supervisor", "peon-forkserver", "peon-worker"}

    def every_role_seen() -> bool:
        for process in (supervisor, *supervisor.children(recursive=True)):
            try:  # the worker that served the call may be exiting
                cwds[process.cmdline()[0].split()[0]] = process.cwd()
            except (psutil.NoSuchProcess, psutil.ZombieProcess, IndexError):
                continue
        return roles <= cwds.keys()

    wait_for(every_role_seen, 30)  # the next standby starts after the reply
    assert roles <= cwds.keys(), cwds
    assert set(cwds.values()) == {"/"}, cwds
    ran = fs_session.call("bash", {"command": "pwd"})
    assert ran.ok and ran.value["output"].strip() == str(workspace.resolve()), ran
