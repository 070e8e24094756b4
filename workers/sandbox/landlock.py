"""Landlock through ``ctypes``: the ABI probe, rulesets and restricting the calling thread.

Promise: each function either does exactly what its name says or raises ``OSError`` with the errno the
kernel returned; nothing here degrades silently. :func:`abi_version` never raises: it returns the
kernel's Landlock ABI (1 or more) or 0 with the errno that says why there is none.

Landlock (``Documentation/userspace-api/landlock.rst``) restricts the *calling thread* and everything
it starts afterwards; a domain can only ever get stricter, never be left. Access rights a ruleset
does not *handle* stay allowed, so a ruleset handles every right the running kernel knows (see
:func:`fs_rights`) and then grants them back beneath chosen directories.

No maintained Python binding covers what Peon needs (TCP rules need ABI 4, signal and abstract-socket
scoping ABI 6); the three system calls and their structures are small enough to declare here.

Runs in the supervisor (:func:`abi_version`, probing the kernel as the session opens) and in the worker
(rulesets, and restricting the confined thread).
"""

from __future__ import annotations

import ctypes
import errno
import os
from dataclasses import dataclass

# The system call numbers are the same on every architecture (they were added after the unification).
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446

LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
LANDLOCK_RULE_PATH_BENEATH = 1
LANDLOCK_RULE_NET_PORT = 2

# Filesystem rights, with the ABI that introduced each.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2: link/rename between directories
FS_TRUNCATE = 1 << 14  # ABI 3: truncate(2), ftruncate(2), O_TRUNC
FS_IOCTL_DEV = 1 << 15  # ABI 5: ioctl(2) on character and block devices

_FS_ABI1 = (1 << 13) - 1
FS_RIGHTS_BY_ABI = {1: _FS_ABI1, 2: _FS_ABI1 | FS_REFER, 3: _FS_ABI1 | FS_REFER | FS_TRUNCATE}
FS_READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
# The rights a rule on a file (not a directory) may carry; the others only make sense on directories.
FS_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4

SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

NET_ABI = 4
SCOPE_ABI = 6

PR_SET_NO_NEW_PRIVS = 38


def fs_rights(abi: int) -> int:
    """Every filesystem right a kernel with this ABI knows."""
    if abi >= 5:
        return FS_RIGHTS_BY_ABI[3] | FS_IOCTL_DEV
    return FS_RIGHTS_BY_ABI[min(max(abi, 1), 3)]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _NetPortAttr(ctypes.Structure):
    _pack_ = 1  # declared __attribute__((packed)) in the kernel's header
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]  # the port in host order


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # declared __attribute__((packed)) in the kernel's header
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_prctl.restype = ctypes.c_int


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


@dataclass(frozen=True)
class Probe:
    abi: int  # 0: no Landlock
    errno: int  # why not, when abi is 0


def abi_version() -> Probe:
    result = _syscall(ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0),
                      ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    if result < 0:
        return Probe(0, ctypes.get_errno())
    return Probe(int(result), 0)


class Ruleset:
    """One Landlock ruleset (a file descriptor) being built; :meth:`restrict_current_thread` enforces it."""

    def __init__(self, abi: int, fs: int, net: int = 0, scoped: int = 0):
        attr = _RulesetAttr(fs, net, scoped)
        # Pass only the fields this ABI knows: an older kernel refuses a larger structure (E2BIG).
        size = 24 if scoped else 16 if net else 8
        if (net and abi < NET_ABI) or (scoped and abi < SCOPE_ABI):
            raise OSError(errno.EINVAL, f"Landlock ABI {abi} cannot handle these rights")
        self.fd = _check(_syscall(ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET), ctypes.byref(attr),
                                  ctypes.c_size_t(size), ctypes.c_uint32(0)), "landlock_create_ruleset")

    def allow_beneath(self, path: str, rights: int) -> None:
        """Grant ``rights`` on ``path`` and, for a directory, everything beneath it."""
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        try:
            self.allow_fd(fd, rights, path)
        finally:
            os.close(fd)

    def allow_fd(self, fd: int, rights: int, name: str = "") -> None:
        """Grant ``rights`` on the file ``fd`` (opened with ``O_PATH``) and everything beneath it."""
        attr = _PathBeneathAttr(rights, fd)
        _check(_syscall(ctypes.c_long(SYS_LANDLOCK_ADD_RULE), ctypes.c_int(self.fd),
                        ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH), ctypes.byref(attr), ctypes.c_uint32(0)),
               f"landlock_add_rule({name or fd})")

    def allow_port(self, port: int, rights: int) -> None:
        """Grant the TCP ``rights`` (:data:`NET_CONNECT_TCP`, :data:`NET_BIND_TCP`) on ``port``, for every
        address: Landlock's TCP rules name ports, not hosts."""
        attr = _NetPortAttr(rights, port)
        _check(_syscall(ctypes.c_long(SYS_LANDLOCK_ADD_RULE), ctypes.c_int(self.fd),
                        ctypes.c_int(LANDLOCK_RULE_NET_PORT), ctypes.byref(attr), ctypes.c_uint32(0)),
               f"landlock_add_rule(tcp port {port})")

    def restrict_current_thread(self) -> None:
        """``no_new_privs`` then the ruleset, for the calling thread and whatever it starts afterwards."""
        _check(_prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
        _check(_syscall(ctypes.c_long(SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(self.fd), ctypes.c_uint32(0)),
               "landlock_restrict_self")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Ruleset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
