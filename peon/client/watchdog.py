"""The client's watch over its supervisor's liveness: a caller never waits on a supervisor that stopped answering.

Promises, while calls are pending (whoever reads the channel — the reader thread or a caller reading
its own answer — asks :meth:`Watchdog.wait_ms` how long it may wait, then :meth:`Watchdog.check`):

* a running call is answered by its deadline + ``limits.worker_grace_seconds`` +
  :data:`ANSWER_MARGIN_SECONDS` (the supervisor's ``started`` says by when): past it, the supervisor is
  given up on;
* a supervisor whose process is stopped (``SIGSTOP``) for :data:`ANSWER_MARGIN_SECONDS` while calls
  wait on it is given up on;
* a call not yet started (queued, waiting for its approver or for a worker) must be started or answered
  within :meth:`Watchdog.start_bound` — after the call sent before it could have been answered, the
  pool's start (:data:`POOL_START_SECONDS`), a worker start (twice ``limits.worker_start_seconds``: a hung
  forkserver is replaced once), the cancel grace, ``limits.worker_grace_seconds``,
  :data:`ANSWER_MARGIN_SECONDS` and its own ``yield_seconds`` (152 s with the defaults), plus
  ``limits.approval_timeout_seconds`` from an approval request for it — or the supervisor is taken for
  hung (its event loop blocked, say) and given up on;
* giving up kills the supervisor and everything below it (:meth:`peon.client.rescue.Rescue.kill`), with
  the reason every pending call is then answered with;
* an idle session does not wake up: once no call has been pending for :data:`LIVENESS_CHECK_SECONDS`,
  the reader sleeps without a timeout (:attr:`Watchdog.reader_asleep`) until a submitted call wakes it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING
from collections.abc import Callable

from peon.workers import proctree

from peon.client.calls import PendingCall, PendingCalls

if TYPE_CHECKING:  # annotations only: the client loads the configuration code after its supervisor starts
    from peon.client.config.model import Limits

# After a running call's deadline + worker grace, how long the supervisor still has to answer it
# before the client takes it for unresponsive and kills it; also how long a supervisor may stay
# stopped (SIGSTOP) while calls wait on it.
ANSWER_MARGIN_SECONDS = 5.0
LIVENESS_CHECK_SECONDS = 1.0  # while calls are pending: how often the client looks at its supervisor
LIVENESS_CHECK_MS = int(LIVENESS_CHECK_SECONDS * 1000)
CANCEL_GRACE_SECONDS = 2.0  # a cancelled command's TERM → KILL grace (a job_stop waits it out)
# A session's first calls wait for its pool: the forkserver's launch (a fresh interpreter loading the
# tools, bounded by 60 s in the supervisor's forker) and its first worker (as long again at most).
POOL_START_SECONDS = 120.0


class Watchdog:
    """The liveness watch over one supervisor process, for the calls of :class:`PendingCalls`."""

    def __init__(self, calls: PendingCalls, supervisor_pid: int, limits: Limits, kill: Callable[[str], None]):
        self.calls = calls
        self.supervisor_pid = supervisor_pid
        self.limits = limits
        self.kill = kill  # kills the supervisor and everything below it, for the reason given
        # The reader sleeps without a timeout only when no call is pending (an idle session never
        # wakes up); a call submitted then wakes it, so it watches the supervisor. Guarded by calls.lock.
        self.reader_asleep = False
        self.linger_until: float | None = None
        self.next_look = 0.0  # when the supervisor's process state is next looked at
        self.next_start_look = 0.0  # when the calls not yet started are next checked against their bound
        self.stopped_since: float | None = None  # when the supervisor was first seen stopped

    def wait_ms(self) -> int | None:
        """How long the reader may wait for the supervisor before checking it answers. None (no
        timeout) once no call has been pending for a while: an idle session does not wake up."""
        now = time.monotonic()
        with self.calls.lock:
            if not self.calls.handles:
                if self.linger_until is None:
                    self.linger_until = now + LIVENESS_CHECK_SECONDS
                if now >= self.linger_until:
                    self.reader_asleep = True
                    return None
                return int((self.linger_until - now) * 1000) + 1
            self.linger_until = None
            earliest = min(self.calls.answer_by.values(), default=float("inf"))
        wait = min(earliest + ANSWER_MARGIN_SECONDS - now, LIVENESS_CHECK_SECONDS)
        return max(0, int(wait * 1000) + 1)

    def check(self, quiet: bool = True) -> None:
        """Give up on a supervisor that let a call pass its ``answer_by``, or that is stopped while
        calls wait; a ``quiet`` supervisor (it sent nothing since the last wait) is looked at now and
        then, one that just sent something is evidently not stopped."""
        now = time.monotonic()
        with self.calls.lock:
            overdue = [(call_id, at) for call_id, at in self.calls.answer_by.items()
                       if at + ANSWER_MARGIN_SECONDS <= now]
            handles = {call_id: self.calls.handles.get(call_id) for call_id, _ in overdue}
            pending = len(self.calls.handles)
        if not overdue and pending and now >= self.next_start_look:
            self.next_start_look = now + LIVENESS_CHECK_SECONDS
            late = self.late_to_start(now)
            if late is not None:
                self.give_up(f"stopped answering: call {late.call_id} ({late.tool}) was neither started nor "
                             f"answered {now - late.sent_at:.1f} s after it was sent, past its bound (the calls "
                             f"before it, approval, worker start and grace; its process state: "
                             f"{proctree.status(self.supervisor_pid) or 'gone'})")
                return
        if not overdue:
            # A call that has not said when it must be answered (quick so far, queued, awaiting
            # approval) is not answered by a stopped supervisor either: look at it now and then.
            if not pending or not quiet or now < self.next_look:
                return
            self.next_look = now + LIVENESS_CHECK_SECONDS
            if proctree.status(self.supervisor_pid) == "stopped":
                self.stopped_since = self.stopped_since or now
                if now - self.stopped_since >= ANSWER_MARGIN_SECONDS:
                    self.give_up(f"stopped answering: its process was stopped for {ANSWER_MARGIN_SECONDS:g} s "
                                 f"while {pending} call(s) waited on it")
            else:
                self.stopped_since = None
            return
        call_id = overdue[0][0]
        handle = handles[call_id]
        what = f"call {call_id}" + (f" ({handle.tool})" if handle is not None else "")
        state = proctree.status(self.supervisor_pid)
        how = " (its process was stopped)" if state == "stopped" else ""
        self.give_up(f"stopped answering: it did not answer {what} by its deadline + worker grace + "
                     f"{ANSWER_MARGIN_SECONDS:g} s{how}")

    def start_bound(self) -> float:
        """How long after it may begin a call must be started (``started``) or answered: its admission,
        the pool's start (a session's first calls wait for it), a worker start (twice: a hung forkserver
        is replaced once), a cancel's grace and the worker grace (a ``job_stop``), and the margin every
        bound gets. A safety net for a supervisor that stopped answering while running (its event loop
        blocked): generous, so a slow start on a loaded machine is never taken for one."""
        return (ANSWER_MARGIN_SECONDS + POOL_START_SECONDS + 2 * self.limits.worker_start_seconds
                + CANCEL_GRACE_SECONDS + self.limits.worker_grace_seconds)

    def late_to_start(self, now: float) -> PendingCall | None:
        """The first pending call that is past its bound without having started. Calls run in the
        order they were sent: each may begin once the one before it is answered (or could have been
        at the latest), so the bounds chain; an approval request extends its call's bound by the
        approver's time."""
        bound_each = self.start_bound()
        with self.calls.lock:
            previous = self.calls.last_answer_at  # the latest time the call before could have been answered
            for call_id, handle in self.calls.handles.items():
                answer_by = self.calls.answer_by.get(call_id)
                if answer_by is not None:  # running: bounded by its own answer_by
                    previous = max(previous, answer_by + ANSWER_MARGIN_SECONDS)
                    continue
                bound = max(handle.sent_at, previous) + bound_each + handle.own_wait
                asked = self.calls.asked_until.get(call_id)
                if asked is not None:
                    bound = max(bound, asked + bound_each + handle.own_wait)
                if now >= bound:
                    return handle
                previous = bound
        return None

    def give_up(self, why: str) -> None:
        """The supervisor cannot be trusted to answer: kill it and everything below it. The reader then
        sees the end of the channel and answers every pending call ``supervisor_died``, saying ``why``."""
        self.kill(f"{why}; the client killed it and everything below it")
