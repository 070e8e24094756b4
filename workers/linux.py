"""Thin wrappers over the Linux calls Peon relies on that Python's ``os`` module lacks: process control
(``prctl``) and path resolution (``openat2``, ``renameat2``, ``fstatfs``).

Promise: each function either does exactly what its name says or raises ``OSError`` with the errno
the kernel returned; nothing here silently degrades.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.prctl.restype = ctypes.c_int

PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def _prctl(option: int, arg2: int = 0) -> int:
    result = _libc.prctl(option, arg2, 0, 0, 0)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")
    return int(result)


def unblock_signals() -> None:
    """Unblock every signal in the calling thread. A process inherits the signal mask of the thread that
    forked it, across ``exec`` too, and a client may start a session from a thread that blocks the
    signals its main thread handles (:mod:`peon.core.threads`): Peon's processes are stopped with ``SIGTERM``,
    reap on ``SIGCHLD`` and act on their parent's death, so each one unblocks them before anything else."""
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def set_child_subreaper() -> None:
    """Orphaned descendants are reparented to this process instead of init."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def is_child_subreaper() -> bool:
    value = ctypes.c_int(0)
    if _libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.cast(ctypes.byref(value), ctypes.c_void_p).value or 0, 0, 0, 0) < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return bool(value.value)


def set_parent_death_signal(sig: signal.Signals) -> None:
    """Ask the kernel to send ``sig`` to this process when the thread that forked it exits."""
    _prctl(PR_SET_PDEATHSIG, int(sig))


def set_dumpable(dumpable: bool) -> None:
    """With ``False``, processes of the same user can no longer ptrace this one, read its memory or
    take its descriptors (``pidfd_getfd``), and it leaves no core dump. ``execve`` resets it, so the
    commands a worker starts are ordinary processes again."""
    _prctl(PR_SET_DUMPABLE, 1 if dumpable else 0)


def is_dumpable() -> bool:
    return bool(_prctl(PR_GET_DUMPABLE))


# -- path resolution and renames -----------------------------------------------------------------------

SYS_OPENAT2 = 437  # the same number on every architecture (added after the syscall table unification)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
RENAME_NOREPLACE = 1 << 0
RENAME_EXCHANGE = 1 << 1
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}  # used only where libc lacks renameat2 (glibc < 2.28)
PROC_SUPER_MAGIC = 0x9FA0

_libc.syscall.restype = ctypes.c_long


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _raise_errno(what: str) -> None:
    code = ctypes.get_errno()
    raise OSError(code, os.strerror(code), what)


def openat2(dirfd: int, path: str, flags: int, mode: int = 0,
            resolve: int = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) -> int:
    """``openat2(2)``: open ``path`` relative to ``dirfd`` under the ``resolve`` restrictions (close-on-exec)."""
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    fd = _libc.syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dirfd), os.fsencode(path),
                       ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        _raise_errno(path)
    return int(fd)


def renameat2(olddirfd: int, old: str, newdirfd: int, new: str, flags: int) -> None:
    """``renameat2(2)`` with ``RENAME_NOREPLACE`` / ``RENAME_EXCHANGE`` (libc's, else the raw syscall)."""
    fn = getattr(_libc, "renameat2", None)
    if fn is not None:
        result = fn(ctypes.c_int(olddirfd), os.fsencode(old), ctypes.c_int(newdirfd), os.fsencode(new),
                    ctypes.c_uint(flags))
    else:
        number = _SYS_RENAMEAT2.get(platform.machine())
        if number is None:
            raise OSError(errno.ENOSYS, "renameat2 is not available on this platform", old)
        result = _libc.syscall(ctypes.c_long(number), ctypes.c_int(olddirfd), os.fsencode(old),
                               ctypes.c_int(newdirfd), os.fsencode(new), ctypes.c_uint(flags))
    if result != 0:
        _raise_errno(old)


def filesystem_type(fd: int) -> int:
    """``fstatfs(2)``'s ``f_type`` of the file system holding ``fd`` (e.g. :data:`PROC_SUPER_MAGIC`)."""
    buf = ctypes.create_string_buffer(256)  # struct statfs; f_type is its first field (a long)
    if _libc.fstatfs(ctypes.c_int(fd), buf) != 0:
        _raise_errno(f"fd {fd}")
    return ctypes.c_long.from_buffer(buf).value
