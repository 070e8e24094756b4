"""Thin wrappers over the Linux process-control calls Peon relies on.

Promise: each function either does exactly what its name says or raises ``OSError`` with the errno
the kernel returned; nothing here silently degrades.
"""

from __future__ import annotations

import ctypes
import os
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
    return result


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
