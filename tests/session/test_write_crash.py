"""Crash atomicity: the writing worker is SIGKILLed at random points during many large replaces and
creates. Afterwards the destination is always exactly the old or the new content (or, for a create,
absent or the new content), never partial, and no temporary file survives the next write.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import time

import pytest

from peon.core.paths import TEMP_PREFIX
from helpers import is_zombie, wait_for
from peon.workers.proctree import descendants

SIZE = 6 << 20  # large enough that writing and fsyncing takes a while
ROUNDS = 20  # per mode
SEED = int(os.environ.get("PEON_CRASH_SEED", random.randrange(1 << 30)))


def content(tag: str, i: int) -> str:
    unit = f"{tag}-{i:04d}|"
    return (unit * (SIZE // len(unit) + 1))[:SIZE]


def write_worker(session, timeout: float = 20.0) -> int | None:
    """The pid of the session's worker that is serving a write call."""
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        for pid in descendants(session.supervisor_pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read().startswith(b"peon-worker write"):
                        return pid
            except OSError:
                continue
        time.sleep(0.0005)
    return None


def temps(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(TEMP_PREFIX))


@pytest.mark.timeout(300)
def test_sigkill_during_writes_never_leaves_partial_files(open_session, workspace):
    rng = random.Random(SEED)
    session = open_session()
    big = workspace / "big"
    big.mkdir()
    where = f"(seed {SEED}; rerun with PEON_CRASH_SEED={SEED})"

    # How long a write takes once its worker is visible: the kills are spread over that span.
    target = big / "file"
    target.write_text(content("old", 0))
    spans = []
    for i in range(3):
        handle = session.submit("write", {"path": "big/file", "content": content("cal", i), "mode": "replace"})
        seen = write_worker(session)
        assert seen is not None
        started = time.monotonic()
        assert handle.result(60).ok
        spans.append(time.monotonic() - started)
    span = statistics.median(spans)

    stats = {"crashed": 0, "ok": 0, "old kept": 0, "temp left": 0}
    marker_exists = False
    for i in range(2 * ROUNDS):
        create = i % 2 == 1
        new = content("new", i)
        if create:
            path = f"big/created-{i}"
            old = None
        else:
            path = "big/file"
            old = content("old", i)
            target.write_text(old)
        handle = session.submit("write", {"path": path, "content": new, "mode": "create" if create else "replace"})
        pid = write_worker(session)
        assert pid is not None, where
        time.sleep(rng.uniform(0, 1.3 * span))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        result = handle.result(60)
        # A write that finished first leaves its worker waiting for the next call, which the kill then
        # ends: gone before that call, or that call would be the one it crashed.
        assert wait_for(lambda pid=pid: is_zombie(pid), 10), where
        if result.ok:
            stats["ok"] += 1
        else:
            assert result.error.code == "worker_crashed", (result.error, where)
            stats["crashed"] += 1

        destination = workspace / path
        if create:
            assert not destination.exists() or destination.read_text() == new, f"partial create {where}"
            assert destination.exists() or not result.ok, where
        else:
            observed = destination.read_text()
            assert observed in (old, new), f"partial replace: {len(observed)} bytes {where}"
            if result.ok:
                assert observed == new, where
            stats["old kept"] += observed == old
        left = temps(big)
        assert all(len(name) == len(TEMP_PREFIX) + 16 for name in left), left
        stats["temp left"] += bool(left)

        # The next write in the same directory removes what the killed one left behind.
        marker = session.call("write", {"path": "big/marker", "content": str(i),
                                        "mode": "replace" if marker_exists else "create"})
        assert marker.ok, marker.error
        marker_exists = True
        assert temps(big) == [], f"temporary files survived the next write {where}"

    # The kills really landed inside writes: some before the install, some leaving a temp file.
    assert stats["crashed"] > 0 and stats["old kept"] > 0 and stats["temp left"] > 0, (stats, where)
