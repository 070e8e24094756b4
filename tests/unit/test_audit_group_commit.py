"""Group commit of the audit log (supervisor/approval/audit.py): lines written while an ``fdatasync`` runs
share the next one, none is acknowledged before an ``fdatasync`` begun after it was written succeeded,
and a failed sync refuses every line it should have covered and cuts them back."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import threading

import pytest

from peon.supervisor.approval.audit import AuditLog


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


class HeldSync:
    """``os.fdatasync`` that waits for :attr:`go` on its first call (then fails if told to)."""

    def __init__(self, fail_first: bool = False):
        self.real = os.fdatasync
        self.go = threading.Event()
        self.calls = 0
        self.fail_first = fail_first

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self.calls == 1:
            self.go.wait(10)
            if self.fail_first:
                raise OSError(errno.EIO, "Input/output error")
        self.real(fd)


async def until(predicate) -> None:
    for _ in range(1000):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("never happened")


def test_lines_written_during_a_sync_share_the_next_one(tmp_path, monkeypatch):
    sync = HeldSync()
    monkeypatch.setattr(os, "fdatasync", sync)

    async def scenario():
        log = AuditLog(tmp_path, max_bytes=1 << 20, backups=1, fsync=True)
        first = asyncio.ensure_future(log.commit_grouped({"n": 0}))
        await until(lambda: sync.calls == 1)  # the first sync runs, held
        rest = [asyncio.ensure_future(log.commit_grouped({"n": n})) for n in range(1, 10)]
        await asyncio.sleep(0.05)
        assert not first.done() and not any(task.done() for task in rest)
        sync.go.set()
        await first
        await asyncio.gather(*rest)
        log.close()
        return log.syncs

    syncs = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert syncs == 2 and sync.calls == 2  # ten lines, two fdatasyncs
    assert [entry["n"] for entry in lines(tmp_path / "audit.jsonl")] == list(range(10))


def test_a_failed_sync_refuses_its_lines_and_cuts_them_back(tmp_path, monkeypatch):
    async def scenario():
        log = AuditLog(tmp_path, max_bytes=1 << 20, backups=1, fsync=True)
        log.commit({"n": "durable"})  # synced on its own
        sync = HeldSync(fail_first=True)
        monkeypatch.setattr(os, "fdatasync", sync)
        waiting = [asyncio.ensure_future(log.commit_grouped({"n": n})) for n in range(3)]
        await until(lambda: sync.calls == 1)
        sync.go.set()
        outcomes = await asyncio.gather(*waiting, return_exceptions=True)
        assert all(isinstance(outcome, OSError) and outcome.errno == errno.EIO for outcome in outcomes)
        assert [entry["n"] for entry in lines(tmp_path / "audit.jsonl")] == ["durable"]
        await log.commit_grouped({"n": "after"})  # the log goes on
        log.close()

    asyncio.run(asyncio.wait_for(scenario(), 20))
    assert [entry["n"] for entry in lines(tmp_path / "audit.jsonl")] == ["durable", "after"]


@pytest.mark.parametrize("fsync", [False, True])
def test_a_grouped_line_is_in_the_log_when_it_returns(tmp_path, fsync):
    async def scenario():
        log = AuditLog(tmp_path, max_bytes=1 << 20, backups=1, fsync=fsync)
        await asyncio.gather(*(log.commit_grouped({"n": n}) for n in range(5)))
        assert sorted(entry["n"] for entry in lines(tmp_path / "audit.jsonl")) == list(range(5))
        assert await log.record_grouped({"n": "result"}) is True
        log.close()
        return log.syncs

    syncs = asyncio.run(asyncio.wait_for(scenario(), 20))
    assert (syncs == 0) if not fsync else (1 <= syncs <= 3)
