"""Race: a thread keeps exchanging a workspace directory with a symlink to outside (RENAME_EXCHANGE)
while reads and creates run hundreds of times. Zero reads may return outside bytes and zero files may
land outside — with both resolvers, directly and through a real session. A control shows the harness
does catch a resolver that checks a path string and then reopens it by name.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from peon.core.errors import ToolError
from peon.core.paths import parse_file_path
from peon.workers import fs, linux

RESOLVERS = ["openat2", "walk"]
BUDGET_SECONDS = 8.0  # per scenario; the loops stop early when they run out of time


@pytest.fixture(params=RESOLVERS)
def resolver(request):
    if request.param == "openat2" and not fs.openat2_available():
        pytest.skip("openat2 is not available on this kernel")
    return fs.Resolver(request.param)


class Swapper:
    """Exchange ``ws/d`` (a real directory) and ``ws/s`` (a symlink leading out), as fast as it can."""

    def __init__(self, ws: Path):
        self.fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
        self.stop = threading.Event()
        self.swaps = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            linux.renameat2(self.fd, "d", self.fd, "s", linux.RENAME_EXCHANGE)
            self.swaps += 1

    def __enter__(self) -> Swapper:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()
        os.close(self.fd)


def build(tmp_path: Path, absolute: bool) -> tuple[Path, Path]:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    for base, tag in ((ws / "d", "inside"), (outside, "OUTSIDE")):
        (base / "sub").mkdir(parents=True)
        (base / "f").write_text(tag)
        (base / "sub" / "f").write_text(tag)
    os.symlink(str(outside) if absolute else "../outside", ws / "s")
    return ws, outside


def listing(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


def real_dir(ws: Path) -> Path:
    return ws / ("s" if os.path.islink(ws / "d") else "d")


def check(outcomes: Counter, ws: Path, outside: Path, outside_before: list[str], created: list[str]) -> None:
    assert outcomes["read outside bytes"] == 0, outcomes
    assert listing(outside) == outside_before, "a file landed outside the workspace"
    unexpected = {k: v for k, v in outcomes.items()
                  if k not in ("read inside", "read refused", "created", "create refused")}
    assert not unexpected, outcomes
    real = real_dir(ws)
    for name in created:
        assert (real / name).read_text() == "new", name
    # The race was live: both the real directory and the symlink were met.
    assert outcomes["read inside"] > 0 and outcomes["read refused"] > 0, outcomes
    assert outcomes["created"] > 0 and outcomes["create refused"] > 0, outcomes


@pytest.mark.timeout(120)
@pytest.mark.parametrize("absolute", [False, True], ids=["relative-link", "absolute-link"])
def test_race_direct(tmp_path, resolver, absolute):
    ws, outside = build(tmp_path, absolute)
    before = listing(outside)
    outcomes: Counter = Counter()
    created: list[str] = []
    root = fs.open_root(ws)
    try:
        with Swapper(ws) as swapper:
            until = time.monotonic() + BUDGET_SECONDS
            i = 0
            while i < 3000 and time.monotonic() < until:
                text = "d/f" if i % 2 else "d/sub/f"
                try:
                    window = fs.read_window(root, parse_file_path(text), resolver, lambda total: (0, total))
                    outcomes["read inside" if window.data == b"inside" else "read outside bytes"] += 1
                except ToolError as exc:
                    outcomes["read refused" if exc.code.value == "outside_workspace" else f"read {exc.code.value}"] += 1
                name = f"sub/new-{i}" if i % 2 else f"new-{i}"
                try:
                    fs.write_file(root, parse_file_path(f"d/{name}"), b"new", create=True, expected_sha256=None,
                                  resolver=resolver)
                    outcomes["created"] += 1
                    created.append(name)
                except ToolError as exc:
                    refused = exc.code.value == "outside_workspace"
                    outcomes["create refused" if refused else f"create {exc.code.value}"] += 1
                i += 1
        assert swapper.swaps > 100
    finally:
        os.close(root)
    assert i >= 200, f"only {i} rounds ran within {BUDGET_SECONDS} s"
    check(outcomes, ws, outside, before, created)


@pytest.mark.timeout(180)
def test_race_through_session(open_session, tmp_path, resolver):
    ws, outside = build(tmp_path, absolute=False)
    before = listing(outside)
    session = open_session(workspace=ws, env={"PEON_FS_RESOLVER": resolver.value})
    outcomes: Counter = Counter()
    created: list[str] = []
    with Swapper(ws):
        until = time.monotonic() + 3 * BUDGET_SECONDS
        i = 0
        while i < 300 and time.monotonic() < until:
            r = session.call("read", {"path": "d/sub/f" if i % 2 else "d/f"})
            if r.ok:
                outcomes["read inside" if r.value["content"] == "inside" else "read outside bytes"] += 1
            else:
                outcomes["read refused" if r.error.code == "outside_workspace" else f"read {r.error.code}"] += 1
            name = f"sub/new-{i}" if i % 2 else f"new-{i}"
            r = session.call("write", {"path": f"d/{name}", "content": "new", "mode": "create"})
            if r.ok:
                outcomes["created"] += 1
                created.append(name)
            else:
                outcomes["create refused" if r.error.code == "outside_workspace" else f"create {r.error.code}"] += 1
            i += 1
    assert i >= 100, f"only {i} rounds ran"
    check(outcomes, ws, outside, before, created)


@pytest.mark.timeout(60)
def test_harness_catches_check_then_open_by_name(tmp_path):
    """The control: resolving the string, checking it, then opening by name does escape here."""
    ws, _outside = build(tmp_path, absolute=False)
    escaped = 0
    with Swapper(ws):
        until = time.monotonic() + 20
        while not escaped and time.monotonic() < until:
            for _ in range(200):
                try:
                    if not os.path.realpath(ws / "d" / "f").startswith(str(ws) + os.sep):
                        continue  # the check refuses it
                    with open(ws / "d" / "f") as f:  # ... and then the name is opened again
                        escaped += f.read() == "OUTSIDE"
                except OSError:
                    pass  # realpath itself trips over the swap now and then
    assert escaped, "the swapper never redirected a check-then-open; the race tests would prove nothing"
