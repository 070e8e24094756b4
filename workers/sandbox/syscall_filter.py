"""The sandbox's seccomp filter, built with libseccomp (``pyseccomp``) from the rules the plan decided.

Promises:

* :func:`available` says whether libseccomp can be loaded here (never raises);
* :func:`build` turns :class:`~peon.workers.sandbox.plan.SeccompRules` into a filter that allows every
  system call except the ones the rules name, which fail with a stated errno (never kill): setuid,
  setgid and sticky ``chmod`` with ``EPERM``; with ``metadata``, ``chown`` with ``EPERM`` and
  ``setxattr``/``removexattr`` with ``EOPNOTSUPP``; ``socket`` of a family outside the allowed ones with
  ``EAFNOSUPPORT``; with ``inet_stream_only``, IPv4/IPv6 sockets other than TCP with ``EACCES``;
  ``io_uring_setup`` with ``EPERM`` (io_uring would do socket and file operations the filter never sees);
  and with ``other_processes``, every change to a process that is not the caller itself with ``EPERM``:
  ``prlimit64`` setting a limit of a pid other than 0, ``setpriority``/``getpriority`` and ``ioprio_set``
  of anything but the caller's own process or process group (``who`` 0), ``sched_setaffinity``,
  ``sched_setscheduler``, ``sched_setparam``, ``sched_setattr``, ``migrate_pages`` and ``move_pages`` of a
  pid other than 0, and ``kcmp`` and ``process_vm_writev`` always (so ``ulimit``, ``nice``, ``prlimit CMD``,
  ``taskset MASK CMD`` and ``ionice -c N CMD`` work; ``renice -p``, ``prlimit --pid`` and ``taskset -p``
  of any pid do not);
* :meth:`Filter.load` applies it to the calling thread only (no ``TSYNC``): the worker's own thread
  stays unfiltered, the confined thread and every process it starts are filtered for good;
* a filter is compiled once per worker and set of rules (libseccomp's compiler costs about as much as the
  rest of a sandboxed start): :func:`build` keeps the BPF program libseccomp exported, and each
  :meth:`Filter.load` hands that same program to the kernel with one ``prctl`` — the program
  ``seccomp_load`` would generate and load (with ``no_new_privs``, no ``TSYNC``, no logging).

System calls added after the libseccomp on the machine was built (``fchmodat2``, ``setxattrat``,
``removexattrat``) are named by number: since Linux 5.1 new system calls have one number on every
architecture.

Runs in the supervisor (:func:`available`, as the session opens) and in the worker (:func:`build`, and
:meth:`Filter.load` in the confined thread).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
from typing import Any

from peon.workers.sandbox.plan import SOCK_TYPE_MASK, SPECIAL_MODE_BITS, AF_INET, AF_INET6, SeccompRules

SYS_FCHMODAT2 = 452
SYS_SETXATTRAT = 463
SYS_REMOVEXATTRAT = 466
SPECIAL_BITS = tuple(bit for bit in (0o4000, 0o2000, 0o1000) if bit & SPECIAL_MODE_BITS)
NON_STREAM_TYPES = (2, 3, 4, 5, 10)  # SOCK_DGRAM, SOCK_RAW, SOCK_RDM, SOCK_SEQPACKET, SOCK_PACKET

# (system call, index of its mode argument)
CHMOD_CALLS: tuple[tuple[str | int, int], ...] = (("chmod", 1), ("fchmod", 1), ("fchmodat", 2), (SYS_FCHMODAT2, 2))
CHOWN_CALLS = ("chown", "fchown", "lchown", "fchownat")
# Calls whose first argument is the pid they act on (0: the caller): refused for any other pid.
PID_CALLS = ("sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr", "migrate_pages",
             "move_pages")
# (call, the largest "which" that names the caller's own process or group): setpriority and getpriority take
# PRIO_PROCESS 0, PRIO_PGRP 1 (PRIO_USER 2 is every process of the user); ioprio_set IOPRIO_WHO_PROCESS 1,
# IOPRIO_WHO_PGRP 2 (IOPRIO_WHO_USER 3). "who" is the second argument; 0 is the caller.
WHICH_WHO_CALLS = (("setpriority", 1), ("getpriority", 1), ("ioprio_set", 2))
ALWAYS_REFUSED = ("kcmp", "process_vm_writev")
XATTR_CALLS: tuple[str | int, ...] = ("setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
                                      "fremovexattr", SYS_SETXATTRAT, SYS_REMOVEXATTRAT)


# pyseccomp finds libc and libseccomp with ctypes.util.find_library, which runs `ldconfig -p` in a
# subprocess: 40-60 ms of every worker's call (bench/studies/bench_sandbox.py). The sonames are stable, so they are
# tried first, and the module is loaded once, here, in the process that forks the workers.
_SONAMES = {"c": "libc.so.6", "seccomp": "libseccomp.so.2"}


def _load() -> tuple[Any, str]:
    import ctypes
    import ctypes.util

    search = ctypes.util.find_library

    def known_first(name: str) -> str | None:
        soname = _SONAMES.get(name)
        if soname is not None:
            try:
                ctypes.CDLL(soname)
                return soname
            except OSError:
                pass
        return search(name)

    ctypes.util.find_library = known_first
    try:
        import pyseccomp  # type: ignore[import-untyped]
    except (ImportError, OSError, RuntimeError) as exc:
        return None, f"libseccomp cannot be loaded ({exc}); install libseccomp2"
    finally:
        ctypes.util.find_library = search
    return pyseccomp, ""


_pyseccomp, _problem = _load()


def _library() -> Any:
    if _pyseccomp is None:
        raise RuntimeError(_problem)
    return _pyseccomp


def available() -> str:
    """"" when a filter can be built here, else why not."""
    return _problem


PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
BPF_INSTRUCTION_BYTES = 8  # struct sock_filter: u16 code, u8 jt, u8 jf, u32 k

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
_libc.prctl.restype = ctypes.c_int


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class Filter:
    """A compiled filter: its BPF program, loaded into the calling thread by :meth:`load`."""

    def __init__(self, program: bytes):
        if not program or len(program) % BPF_INSTRUCTION_BYTES or len(program) // BPF_INSTRUCTION_BYTES > 0xFFFF:
            raise RuntimeError(f"libseccomp exported a BPF program of {len(program)} bytes")
        self._buffer = ctypes.create_string_buffer(program, len(program))
        self._fprog = _SockFprog(len(program) // BPF_INSTRUCTION_BYTES, ctypes.addressof(self._buffer))

    def load(self) -> None:
        """Filter the calling thread (and what it starts) for good; ``OSError`` if the kernel refuses."""
        for option, arg2, arg3 in ((PR_SET_NO_NEW_PRIVS, 1, None),
                                   (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(self._fprog))):
            if _libc.prctl(option, arg2, arg3, 0, 0) < 0:
                err = ctypes.get_errno()
                raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def _export(flt: Any) -> bytes:
    """The BPF program libseccomp generates for ``flt`` (what ``seccomp_load`` would load)."""
    fd = os.memfd_create("peon-seccomp", os.MFD_CLOEXEC)
    try:
        with os.fdopen(os.dup(fd), "rb", closefd=True) as handle:
            flt.export_bpf(handle)
        size = os.fstat(fd).st_size
        return os.pread(fd, size, 0)
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=4)  # per worker: its session's one or two sets of rules
def build(rules: SeccompRules) -> Filter:
    sc = _library()
    flt = sc.SyscallFilter(sc.ALLOW)

    def add(action: int, call: str | int, *args: Any) -> None:
        try:
            flt.add_rule(action, call, *args)
        except ValueError:  # a name this libseccomp does not know: that call does not exist here either
            if isinstance(call, int):
                raise

    if rules.special_chmod:
        for call, index in CHMOD_CALLS:
            for bit in SPECIAL_BITS:
                add(sc.ERRNO(errno.EPERM), call, sc.Arg(index, sc.MASKED_EQ, bit, bit))
    if rules.metadata:
        for call in CHOWN_CALLS:
            add(sc.ERRNO(errno.EPERM), call)
        for call in XATTR_CALLS:
            add(sc.ERRNO(errno.EOPNOTSUPP), call)
    if rules.socket_families:
        allowed = set(rules.socket_families)
        top = max(allowed) + 1
        for family in range(top):
            if family not in allowed:
                add(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.EQ, family))
        add(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.GE, top))
    if rules.inet_stream_only:
        for family in (AF_INET, AF_INET6):
            for kind in NON_STREAM_TYPES:
                add(sc.ERRNO(errno.EACCES), "socket", sc.Arg(0, sc.EQ, family),
                    sc.Arg(1, sc.MASKED_EQ, SOCK_TYPE_MASK, kind))
    if rules.no_io_uring:
        add(sc.ERRNO(errno.EPERM), "io_uring_setup")
    if rules.other_processes:
        refuse = sc.ERRNO(errno.EPERM)
        add(refuse, "prlimit64", sc.Arg(0, sc.NE, 0), sc.Arg(2, sc.NE, 0))  # reading a limit stays allowed
        for call in PID_CALLS:
            add(refuse, call, sc.Arg(0, sc.NE, 0))
        for call, own in WHICH_WHO_CALLS:
            add(refuse, call, sc.Arg(0, sc.GT, own))
            add(refuse, call, sc.Arg(1, sc.NE, 0))
        for call in ALWAYS_REFUSED:
            add(refuse, call)
    return Filter(_export(flt))
