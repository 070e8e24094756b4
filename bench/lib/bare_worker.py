"""What a dedicated worker costs with nothing of Peon's in it: the floors of the design, current and former.

The current design (:class:`ReusedWorker`, :class:`SupervisedReusedWorker`): a worker serves one call at
a time and, after a clean one, the next, on the same channel. Its floor is a message to a waiting
``multiprocessing`` worker and its answer back, in ``Connection`` frames (the framing of a session's
worker channel), and for a command the ``posix_spawn`` of ``/bin/bash -lc true`` in a session of its
own and its reaping through a pidfd, as a session's worker starts a command:

* :class:`ReusedWorker`: this process asks a long-lived worker (a ``multiprocessing`` ``Process`` of the
  ``forkserver`` context) directly: two hops per call;
* :class:`SupervisedReusedWorker`: the design's whole path. This process asks a bare supervisor process,
  which relays to a long-lived worker of its own and relays the answer back: four hops per call, as a
  call through a session's supervisor takes, and nothing else.

The former design, a process per call: each reader below serves ``read`` of one file the way a session
served a call before workers were reused — by a process started for that call alone, one standby started
ahead — and does nothing else: no validation, rating, approval, audit, cgroup, event loop or warm-up.

* :class:`MultiprocessingReader`: the standby is a ``multiprocessing`` ``Process`` of the ``forkserver``
  context (this module preloaded: the forkserver holds nothing else), the request and the bytes go
  over a ``Pipe``. This is the machinery the design card names, alone.
* :class:`ForkReader`: the standby is an ``os.fork()`` of the calling process, with two pipes, reaped
  with ``waitpid``: a worker forked by hand.
* :class:`SupervisedReader`: the design's whole path. The caller hands the request to a bare
  supervisor — a ``multiprocessing`` ``Process`` that owns its own forkserver and serves each request
  by a :class:`MultiprocessingReader` of its own — and gets the bytes back from it: four hops between
  processes per call, as a call through a session's supervisor takes, and nothing else.

A call returns with the reply; then a thread starts the next standby and reaps the served worker, as a
session's forker thread does, and the next call waits for that standby. Back to back, each call so
pays the whole cycle; apart, only the call.

When :meth:`close` returns, no worker or supervisor it started (nor any command a worker spawned) is alive
(``multiprocessing``'s forkserver lives until this process exits).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing
from multiprocessing import forkserver
import os
import select
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

MAX_REPLY = 1 << 20
# What a reused worker does per request: read the file the request names, or start /bin/bash -lc true.
Job = Literal["read", "spawn"]
BASH_TRUE = ["bash", "-lc", "true"]


def supervise(connection: Any, path: bytes) -> None:
    """A bare supervisor's whole life: relay each request to a worker of its own, its bytes back, until
    the caller closes the channel; then retire the standby, stop its forkserver and exit."""
    reader = MultiprocessingReader(Path(os.fsdecode(path)))
    try:
        while True:
            try:
                request = connection.recv_bytes(4096)
            except EOFError:
                return
            connection.send_bytes(reader.serve(request))  # the reply first, then the next standby
            reader.refill()
    finally:
        reader.close()
        connection.close()
        forkserver._forkserver._stop()  # it would outlive this process, reparented, until it saw the EOF


def serve_one(connection: Any) -> None:
    """A standby's whole life: one request (a path), its bytes back, exit once retired. As a session's
    worker does, it exits only when its channel closes (bounded), not on the path of the reply."""
    try:
        path = connection.recv_bytes(4096)
    except EOFError:  # retired before a call
        return
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        connection.send_bytes(os.read(fd, MAX_REPLY))
    finally:
        os.close(fd)
    try:
        connection.poll(10.0)
    finally:
        connection.close()


@contextlib.contextmanager
def _no_main_module() -> Iterator[None]:
    """Start a ``Process`` as a session's supervisor does (it runs as a package's ``__main__``, which
    ``multiprocessing`` leaves alone): from a script, a ``forkserver`` child would run the whole script
    again before its target."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


class _Reader:
    """One standby ahead, replaced by a thread after each call."""

    def __init__(self, path: Path):
        self.path = os.fsencode(path)
        self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="bare-worker")
        self._standby = self._thread.submit(self._start)

    def __call__(self) -> bytes:
        data = self.serve(self.path)
        self.refill()
        return data

    def serve(self, path: bytes) -> bytes:
        """One call, by the standby (waiting for it if it is still being started)."""
        self._served = self._standby.result()
        return self._serve(self._served, path)

    def refill(self) -> None:
        """Start the next standby and retire the one that served, in the thread."""
        self._standby = self._thread.submit(self._replace, self._served)

    def _replace(self, served: Any) -> Any:
        standby = self._start()
        self._retire(served)
        return standby

    def close(self) -> None:
        self._retire(self._standby.result())
        self._thread.shutdown()

    def _start(self) -> Any:
        raise NotImplementedError

    def _serve(self, standby: Any, path: bytes) -> bytes:
        raise NotImplementedError

    def _retire(self, standby: Any) -> None:
        """Close its channel (a standby that never served then exits) and reap it."""
        raise NotImplementedError


def _forkserver_context() -> Any:
    """This process's ``forkserver`` context, its forkserver running with this module preloaded."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    # The forkserver imports its preload before it takes this process's sys.path (Python 3.11):
    # without the folder this module is imported from (by its full name) in its environment, every
    # worker would import the module anew.
    home = str(Path(__file__).resolve().parents[__name__.count(".")])
    python_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (home, python_path)))
    try:
        forkserver.ensure_running()
    finally:
        if python_path is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = python_path
    return context


def _start_process(context: Any, name: str, target: Any, *args: Any) -> tuple[Any, Any]:
    """A started ``Process`` running ``target(connection, *args)``, and our end of that connection."""
    ours, theirs = context.Pipe()
    process = context.Process(target=target, args=(theirs, *args), name=name)
    with _no_main_module():
        process.start()
    theirs.close()
    return process, ours


def _retire_process(started: tuple[Any, Any]) -> None:
    """Close our end of its connection (it then exits) and join it."""
    process, connection = started
    connection.close()
    process.join()


class MultiprocessingReader(_Reader):
    def __init__(self, path: Path):
        self.context = _forkserver_context()
        super().__init__(path)

    def _start(self) -> tuple[Any, Any]:
        return _start_process(self.context, "bare-worker", serve_one)

    def _serve(self, standby: tuple[Any, Any], path: bytes) -> bytes:
        _, connection = standby
        connection.send_bytes(path)
        return bytes(connection.recv_bytes(MAX_REPLY))

    def _retire(self, standby: tuple[Any, Any]) -> None:
        _retire_process(standby)


class ForkReader(_Reader):
    def _start(self) -> tuple[int, int, int]:
        request_r, request_w = os.pipe2(os.O_CLOEXEC)
        reply_r, reply_w = os.pipe2(os.O_CLOEXEC)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                low, high = sorted((request_r, reply_w))  # nothing else of this process's: no pipe of
                os.closerange(3, low)  # another worker may stay open here
                os.closerange(low + 1, high)
                os.closerange(high + 1, os.sysconf("SC_OPEN_MAX"))
                path = os.read(request_r, 4096)
                if path:
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                    os.write(reply_w, os.read(fd, MAX_REPLY))
                    os.close(reply_w)  # the reply ends here, not at this process's exit
                    os.read(request_r, 1)  # which waits for its retirement (the request's end closing)
                code = 0
            finally:
                os._exit(code)
        os.close(request_r)
        os.close(reply_w)
        return pid, request_w, reply_r

    def _serve(self, standby: tuple[int, int, int], path: bytes) -> bytes:
        _, request, reply = standby
        os.write(request, path)
        chunks = []
        while chunk := os.read(reply, MAX_REPLY):
            chunks.append(chunk)
        return b"".join(chunks)

    def _retire(self, standby: tuple[int, int, int]) -> None:
        pid, request, reply = standby
        os.close(request)
        os.close(reply)
        os.waitpid(pid, 0)


class SupervisedReader:
    """The request through a bare supervisor process to a bare worker of its own, and the bytes back."""

    def __init__(self, path: Path):
        self.path = os.fsencode(path)
        self._supervisor, self._connection = _start_process(_forkserver_context(), "bare-supervisor", supervise,
                                                            self.path)

    def __call__(self) -> bytes:
        self._connection.send_bytes(self.path)
        return bytes(self._connection.recv_bytes(MAX_REPLY))

    def close(self) -> None:
        _retire_process((self._supervisor, self._connection))


# -- the current design: a worker reused from call to call -----------------------------------------------


def read_path(path: bytes) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, MAX_REPLY)
    finally:
        os.close(fd)


def spawn_bash_true(env: dict[str, str]) -> bytes:
    """``/bin/bash -lc true`` started as a session's worker starts a command (``posix_spawn``, a session
    and process group of its own), waited for through a pidfd and reaped; its exit status."""
    pid = os.posix_spawn("/bin/bash", BASH_TRUE, env, setsid=True)
    pidfd = os.pidfd_open(pid)
    try:
        select.select([pidfd], [], [])
        status = os.waitid(os.P_PIDFD, pidfd, os.WEXITED)
    finally:
        os.close(pidfd)
    return str(status.si_status if status is not None else -1).encode()


def serve_many(connection: Any, job: Job, env: dict[str, str]) -> None:
    """A reused worker's whole life: each request on its channel answered in turn, until the channel closes."""
    while True:
        try:
            request = connection.recv_bytes(4096)
        except EOFError:
            connection.close()
            return
        connection.send_bytes(read_path(request) if job == "read" else spawn_bash_true(env))


def supervise_reused(connection: Any, job: Job, env: dict[str, str]) -> None:
    """A bare supervisor's whole life: relay each request to a reused worker of its own, and its answer back,
    until the caller closes the channel; then retire the worker, stop its forkserver and exit."""
    worker = ReusedWorker(job, env=env)
    try:
        while True:
            try:
                request = connection.recv_bytes(4096)
            except EOFError:
                return
            connection.send_bytes(worker.ask(bytes(request)))
    finally:
        worker.close()
        connection.close()
        forkserver._forkserver._stop()


class ReusedWorker:
    """A long-lived bare worker, asked call after call over one ``Connection``: per call it reads the
    file a request names (job ``read``; ``worker()`` asks for ``path``) or starts ``/bin/bash -lc true``
    with ``env`` (job ``spawn``)."""

    NAME = "bare-reused-worker"
    TARGET = staticmethod(serve_many)

    def __init__(self, job: Job, path: Path | None = None, env: dict[str, str] | None = None):
        self.request = os.fsencode(path) if path is not None else b"spawn"
        self._started = _start_process(_forkserver_context(), self.NAME, self.TARGET, job, dict(env or {}))

    def __call__(self) -> bytes:
        return self.ask(self.request)

    def ask(self, request: bytes) -> bytes:
        _, connection = self._started
        connection.send_bytes(request)
        return bytes(connection.recv_bytes(MAX_REPLY))

    def close(self) -> None:
        _retire_process(self._started)


class SupervisedReusedWorker(ReusedWorker):
    """The same calls through a bare supervisor process to a long-lived bare worker of its own."""

    NAME = "bare-supervisor"
    TARGET = staticmethod(supervise_reused)
