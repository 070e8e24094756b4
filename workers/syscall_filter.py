"""The sandbox's seccomp filter, built with libseccomp (``pyseccomp``) from the rules the plan decided.

Promises:

* :func:`available` says whether libseccomp can be loaded here (never raises);
* :func:`build` turns :class:`~peon.workers.sandbox_plan.SeccompRules` into a filter that allows every
  system call except the ones the rules name, which fail with a stated errno (never kill): setuid,
  setgid and sticky ``chmod`` with ``EPERM``; with ``metadata``, ``chown`` with ``EPERM`` and
  ``setxattr``/``removexattr`` with ``EOPNOTSUPP``; ``socket`` of a family outside the allowed ones with
  ``EAFNOSUPPORT``; with ``inet_stream_only``, IPv4/IPv6 sockets other than TCP with ``EACCES``; and
  ``io_uring_setup`` with ``EPERM`` (io_uring would do socket and file operations the filter never sees);
* :meth:`Filter.load` applies it to the calling thread only (no ``TSYNC``): the worker's own thread
  stays unfiltered, the confined thread and every process it starts are filtered for good.

System calls added after the libseccomp on the machine was built (``fchmodat2``, ``setxattrat``,
``removexattrat``) are named by number: since Linux 5.1 new system calls have one number on every
architecture.
"""

from __future__ import annotations

import errno
from typing import Any

from .sandbox_plan import SOCK_TYPE_MASK, SPECIAL_MODE_BITS, AF_INET, AF_INET6, SeccompRules

SYS_FCHMODAT2 = 452
SYS_SETXATTRAT = 463
SYS_REMOVEXATTRAT = 466
SPECIAL_BITS = tuple(bit for bit in (0o4000, 0o2000, 0o1000) if bit & SPECIAL_MODE_BITS)
NON_STREAM_TYPES = (2, 3, 4, 5, 10)  # SOCK_DGRAM, SOCK_RAW, SOCK_RDM, SOCK_SEQPACKET, SOCK_PACKET

# (system call, index of its mode argument)
CHMOD_CALLS: tuple[tuple[str | int, int], ...] = (("chmod", 1), ("fchmod", 1), ("fchmodat", 2), (SYS_FCHMODAT2, 2))
CHOWN_CALLS = ("chown", "fchown", "lchown", "fchownat")
XATTR_CALLS: tuple[str | int, ...] = ("setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr",
                                      "fremovexattr", SYS_SETXATTRAT, SYS_REMOVEXATTRAT)


# pyseccomp finds libc and libseccomp with ctypes.util.find_library, which runs `ldconfig -p` in a
# subprocess: 40-60 ms of every worker's call (bench/bench_sandbox.py). The sonames are stable, so they are
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


class Filter:
    def __init__(self, handle: Any):
        self._handle = handle

    def load(self) -> None:
        self._handle.load()


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
    return Filter(flt)
