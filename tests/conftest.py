"""Shared fixtures: workspaces, sessions, ``peon mcp`` servers, and a guard that proves no process outlives its test.

Every session a test opens runs with a unique ``PEON_TEST_TAG`` in its environment, which every
process it starts inherits. After the test, :func:`leftovers` scans ``/proc/*/environ`` for that tag:
anything found is killed (so a failing test still leaves nothing behind) and fails the test. Helpers
that are not fixtures live in the ``tests/helpers`` package (``import helpers``, ``from helpers.mcp import …``):
no test module imports another.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import peon
from helpers import ALLOW_ALL, CGROUP_SUPPORT, CONTAINMENTS, Leftovers
from peon.client.config import merge


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
    from peon.workers import fs

    if request.param == "openat2" and not fs.openat2_available():
        pytest.skip("openat2 is not available on this kernel")
    return {"PEON_FS_RESOLVER": request.param}


@pytest.fixture
def fs_session(open_session, resolver_env):
    return open_session(env=resolver_env)


@pytest.fixture
def session(open_session, containment):
    return open_session({"runtime": {"containment": containment}})


@pytest.fixture
def serial_session(open_session, containment):
    """A session that runs its calls one at a time, in arrival order (limits.max_parallel_calls = 1)."""
    return open_session({"runtime": {"containment": containment}, "limits": {"max_parallel_calls": 1}})


# -- directories the file and skill tests share, in the unit tier and with real sessions -------------------


@pytest.fixture
def tree(tmp_path):
    """tmp/ws (the workspace), tmp/ws-evil (a sibling sharing its prefix), tmp/outside."""
    ws, evil, outside = tmp_path / "ws", tmp_path / "ws-evil", tmp_path / "outside"
    for d in (ws, evil, outside):
        d.mkdir()
    (ws / "d").mkdir()
    (ws / "d" / "f.txt").write_text("inside")
    (ws / "top.txt").write_text("top")
    (outside / "secret").write_text("OUTSIDE")
    (outside / "sub").mkdir()
    (evil / "secret").write_text("EVIL")
    return tmp_path


@pytest.fixture
def roots(tmp_path, workspace):
    """(user root, project root, env) with the user root under an isolated XDG_CONFIG_HOME."""
    user = tmp_path / "xdg" / "peon" / "skills"
    project = workspace / ".peon" / "skills"
    user.mkdir(parents=True)
    project.mkdir(parents=True)
    return user, project, {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}


# -- bench/ (its targets' table and figures), in the unit tier and with real processes ----------------------


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent))
    from bench import targets
    from bench.lib import figures

    return figures, targets


# -- ``peon mcp`` as a subprocess (tests/helpers/mcp.py; imported when used: the MCP SDK is slow to load) --------


@pytest.fixture
def env(leftovers, tmp_path) -> dict:
    from helpers.mcp import isolated_env

    return isolated_env(leftovers, tmp_path / "home")


@pytest.fixture
def raw_server(workspace, env, tmp_path):
    from helpers.mcp import RawServer

    servers = []

    def start(*args: str, command: list[str] | None = None) -> RawServer:
        server = RawServer(workspace, env, tmp_path, *args, command=command)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()
