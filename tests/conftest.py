"""Shared fixtures: workspaces, sessions, and a guard that proves no process outlives its test.

Every session a test opens runs with a unique ``PEON_TEST_TAG`` in its environment, which every
process it starts inherits. After the test, :func:`leftovers` scans ``/proc/*/environ`` for that tag:
anything found is killed (so a failing test still leaves nothing behind) and fails the test.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import psutil
import pytest

import peon
from peon.config import merge
from workers import cgroup

CGROUP_SUPPORT = cgroup.probe()
# Tests of the runtime run with every risk allowed; approval tests pass their own [approval] table.
ALLOW_ALL = {"approval": {"read_only": "allow", "filesystem": "allow", "process": "allow", "delegate": "allow"}}
CONTAINMENTS = ["process-tree", "cgroup"]


def tagged_pids(tag: str) -> list[int]:
    """Every process (but this one) whose environment carries ``PEON_TEST_TAG=<tag>``."""
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            if process.environ().get("PEON_TEST_TAG") == tag:
                found.append(process.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def is_zombie(pid: int) -> bool:
    """Gone, or dead and not yet reaped."""
    try:
        return psutil.Process(pid).status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return True


def living(pids) -> list[int]:
    return [p for p in pids if not is_zombie(p)]


def wait_for(predicate, timeout: float = 10.0, interval: float = 0.02):
    until = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= until:
            return value
        time.sleep(interval)


class Leftovers:
    def __init__(self, home: Path) -> None:
        self.tag = uuid.uuid4().hex
        self.home = home

    def env(self, extra: dict | None = None) -> dict:
        """This process's environment, tagged, with a clean HOME: `bash -l` must not run the
        developer's login profile (slow, and a profile killed mid-way can leave locks behind)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PEON_TEST_TAG", "XDG_"))}
        env["HOME"] = str(self.home)
        env["PEON_TEST_TAG"] = self.tag
        env.update(extra or {})
        return env

    def alive(self) -> list[int]:
        return living(tagged_pids(self.tag))

    def kill_all(self) -> list[int]:
        survivors = self.alive()
        for _ in range(5):
            for pid in self.alive():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if not self.alive():
                break
            time.sleep(0.05)
        return survivors


@pytest.fixture
def leftovers(request, tmp_path_factory):
    guard = Leftovers(tmp_path_factory.mktemp("home"))
    yield guard
    survivors = guard.kill_all()
    if survivors and not getattr(request.node, "_peon_expect_leftovers", False):
        pytest.fail(f"processes outlived the test: {survivors}")


@pytest.fixture
def workspace(tmp_path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture(params=CONTAINMENTS)
def containment(request) -> str:
    if request.param == "cgroup" and not CGROUP_SUPPORT.available:
        pytest.skip(f"cgroup v2 unavailable: {CGROUP_SUPPORT.reason}")
    return request.param


@pytest.fixture
def open_session(workspace, tmp_path, leftovers):
    """Factory: open_session(config=..., **options) -> Session, closed after the test."""
    sessions = []

    def factory(config: dict | None = None, *, env: dict | None = None, **options) -> peon.Session:
        options.setdefault("state_dir", tmp_path / f"state-{len(sessions)}")
        config = merge(ALLOW_ALL, config or {})
        session = peon.Session(options.pop("workspace", workspace), config, env=leftovers.env(env), **options)
        sessions.append(session)
        return session

    yield factory
    for session in sessions:
        session.close()


@pytest.fixture(params=["openat2", "walk"])
def resolver_env(request):
    """The environment that selects each of the file tools' two path resolvers."""
    from workers import fs

    if request.param == "openat2" and not fs.openat2_available():
        pytest.skip("openat2 is not available on this kernel")
    return {"PEON_FS_RESOLVER": request.param}


@pytest.fixture
def fs_session(open_session, resolver_env):
    return open_session(env=resolver_env)


@pytest.fixture
def session(open_session, containment):
    return open_session({"runtime": {"containment": containment}})


def expect_ok(session, tool: str, args) -> dict:
    result = session.call(tool, args)
    assert result.ok, result.error
    return result.value


def expect_error(session, tool: str, args, code: str):
    result = session.call(tool, args)
    assert not result.ok, result.value
    assert result.error.code == code, result.error
    return result.error
