"""Linux namespaces for the landlock sandbox: the session's private network and each worker's mount view.

Promises:

* :func:`probe` says whether this process may create mount and network namespaces from one of its
  threads (root, or ``CAP_SYS_ADMIN``; a container's seccomp profile may still refuse) and never raises;
* :func:`session_network` creates, once per process (the session's supervisor), a network namespace with
  only its own loopback, up, held by a parked thread for the session's life; it returns the
  ``/proc`` path a worker joins it by and its inode (a worker joins only the namespace with that inode).
  Every call of the session shares it, so a server one call started in the background answers the next;
* :func:`enter` runs in the confined thread before Landlock: it gives the thread its own filesystem context,
  joins the session's network namespace, and with ``mount_view`` puts the thread in a mount namespace in which
  every mount is read-only (file contents and metadata alike: ``chmod``, ``chown``, ``utimes``, xattrs fail
  with ``EROFS``) except binds of the writable paths, the protected paths beneath them are read-only binds
  again, each directory holding one inside a writable path (and a repository's ``.git``) is a bind of itself,
  so that renaming, removing or replacing it fails with ``EBUSY``, Peon's own directories (``hidden``: state,
  runtime) are covered by an empty read-only tmpfs, and each named unix socket bound on the host when the call
  started has ``/dev/null`` bound over it (``connect`` fails with ``ECONNREFUSED``). Any failure raises
  ``OSError`` and nothing is started;
* that mount namespace (a :class:`MountView`) is built once per worker and entered again (``setns``) by its
  later calls, each of which first checks it against the host as the call finds it and completes it: the
  writable paths must still be bound, writable, to the inodes the host has at those paths (else a new view is
  built from the host's namespace), every directory holding protected paths must be a mount point, every
  protected path that exists now must be on a read-only mount, every hidden directory covered and every host
  socket listed now covered (each missing one is added). Nothing a command does can change a view: it is
  private (no propagation either way), the command has no capabilities (no ``mount``, ``umount``,
  ``pivot_root`` or ``setns``; a user namespace it makes gets a copy that dies with it), and every mount in it
  is a host directory or a read-only, empty tmpfs, so nothing written in one call is kept in the view for the
  next. So a call sees exactly what a view built for it alone would show, except mounts the host made after
  the view was built (not propagated: not visible at all, where a fresh view would show them).

Threads: ``unshare(CLONE_NEWNS | CLONE_FS)`` and ``setns(CLONE_NEWNET)`` change only the calling thread
(its ``nsproxy`` and ``fs_struct``), which is why the confined thread can do them in a multi-threaded
worker; ``CLONE_NEWUSER`` cannot, so without root this layer is not available and the plan says so.

Runs in the supervisor (:func:`probe` and :func:`session_network` as the session opens, :func:`listen_in`
for its egress proxy) and in the worker's confined thread (:func:`enter`, a :class:`MountView`).
"""

from __future__ import annotations

import ctypes
import os
import socket
import stat
import struct
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fcntl import ioctl

from peon.workers.sandbox.plan import DEVICE_FILES

CLONE_FS = 0x00000200
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_BIND = 1 << 12
MS_REC = 1 << 14
MS_PRIVATE = 1 << 18
SYS_MOUNT_SETATTR = 442  # the same on every architecture
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
SIOCGIFFLAGS, SIOCSIFFLAGS = 0x8913, 0x8914
IFF_UP, IFF_RUNNING = 0x1, 0x40

_libc = ctypes.CDLL(None, use_errno=True)
_libc.unshare.argtypes = [ctypes.c_int]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
_libc.syscall.restype = ctypes.c_long


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


def _check(result: int, what: str) -> None:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), f"unshare({flags:#x})")


def mount(source: str | None, target: str, flags: int, fstype: str | None = None, data: str | None = None) -> None:
    _check(_libc.mount(source.encode() if source else None, target.encode(), fstype.encode() if fstype else None,
                       flags, data.encode() if data else None), f"mount({source} on {target})")


def cover(path: str) -> None:
    """An empty, read-only directory over ``path``: what was beneath is neither readable nor connectable."""
    mount("peon-hidden", path, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "tmpfs", "size=4k,mode=0500")


def set_read_only(path: str, read_only: bool, recursive: bool = True) -> None:
    attr = _MountAttr(MOUNT_ATTR_RDONLY if read_only else 0, 0 if read_only else MOUNT_ATTR_RDONLY, 0, 0)
    _check(_libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD), path.encode(),
                         ctypes.c_uint(AT_RECURSIVE if recursive else 0), ctypes.byref(attr),
                         ctypes.c_size_t(ctypes.sizeof(attr))), f"mount_setattr({path})")


def loopback_up() -> None:
    """Bring ``lo`` up in the calling thread's network namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack("16sH14x", ioctl(sock, SIOCGIFFLAGS, struct.pack("16sH14x", b"lo", 0)))[1]
        ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP | IFF_RUNNING))


def _in_thread(work: object) -> BaseException | None:
    """Run ``work`` on a throwaway thread (its namespaces die with it); what it raised, or None."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            work()  # type: ignore[operator]
        except BaseException as exc:  # handed back to the caller
            raised.append(exc)

    thread = threading.Thread(target=run, name="peon-namespace-probe", daemon=True)
    thread.start()
    thread.join()
    return raised[0] if raised else None


def probe() -> str:
    """"" when mount and network namespaces can be made here, else why not."""
    def trial() -> None:
        unshare(CLONE_FS | CLONE_NEWNS | CLONE_NEWNET)
        mount(None, "/", MS_REC | MS_PRIVATE)
        loopback_up()

    failed = _in_thread(trial)
    if failed is None:
        return ""
    return f"this process cannot create mount and network namespaces ({failed}); they need root (CAP_SYS_ADMIN)"


@dataclass(frozen=True)
class NetworkNamespace:
    path: str  # /proc/<pid>/task/<tid>/ns/net of the parked thread
    inode: int


_session_network: NetworkNamespace | None = None
_session_lock = threading.Lock()


def session_network() -> NetworkNamespace:
    """The process's private network namespace (created at the first call); ``OSError`` if it cannot be."""
    global _session_network
    with _session_lock:
        if _session_network is not None:
            return _session_network
        ready = threading.Event()
        made: list[NetworkNamespace | BaseException] = []

        def hold() -> None:
            try:
                unshare(CLONE_NEWNET)
                loopback_up()
                made.append(NetworkNamespace(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/ns/net",
                                             os.stat("/proc/thread-self/ns/net").st_ino))
            except BaseException as exc:  # handed to the caller
                made.append(exc)
                return
            finally:
                ready.set()
            threading.Event().wait()  # parked for the process's life: the namespace lives as long

        threading.Thread(target=hold, name="peon-session-netns", daemon=True).start()
        ready.wait()
        if isinstance(made[0], BaseException):
            raise OSError(getattr(made[0], "errno", None), f"cannot create the session's network namespace: "
                                                          f"{made[0]}")
        _session_network = made[0]
        return _session_network


def join_network(path: str, inode: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_ino != inode:
            raise OSError(f"{path} is no longer the session's network namespace (inode {inode})")
        _check(_libc.setns(fd, CLONE_NEWNET), "setns(network)")
    finally:
        os.close(fd)


_host_listing = (-1, 0)  # (descriptor of the host's /proc/net/unix, the pid that opened it)


def host_sockets_text() -> str:
    """``/proc/net/unix`` of the network namespace the calling thread was in when this process first
    asked (the worker's own thread: the host's). The file is opened once and read again from its start
    each time (a ``seq_file`` lists the sockets as they are at each read)."""
    global _host_listing
    fd, pid = _host_listing
    if pid != os.getpid():  # first use, or inherited through fork
        fd = os.open("/proc/thread-self/net/unix", os.O_RDONLY | os.O_CLOEXEC)
        _host_listing = (fd, os.getpid())
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 16, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks).decode("utf-8", "surrogateescape")


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def _read_only(path: str) -> bool:
    return bool(os.statvfs(path).f_flag & os.ST_RDONLY)


AT_SYMLINK_NOFOLLOW = 0x100
STATX_ATTR_MOUNT_ROOT = 0x2000  # Linux 5.8; Landlock needs 5.13
_STATX_ATTRIBUTES, _STATX_ATTRIBUTES_MASK = 0x08, 0x38  # offsets in struct statx


def mount_root(path: str) -> bool:
    """Whether ``path`` (not following a final link) is the root of a mount in the calling thread's mount
    namespace (``statx``'s ``STATX_ATTR_MOUNT_ROOT``): true of a bind mount of a directory onto itself,
    which a device and inode comparison cannot tell."""
    buffer = ctypes.create_string_buffer(256)
    _check(_libc.statx(AT_FDCWD, path.encode(), AT_SYMLINK_NOFOLLOW, 0, buffer), f"statx({path})")
    supported = struct.unpack_from("Q", buffer, _STATX_ATTRIBUTES_MASK)[0] & STATX_ATTR_MOUNT_ROOT
    if not supported:
        raise OSError(f"this kernel does not say whether {path} is a mount point (statx)")
    return bool(struct.unpack_from("Q", buffer, _STATX_ATTRIBUTES)[0] & STATX_ATTR_MOUNT_ROOT)


_host_mounts = -1  # the worker's own mount namespace (opened by host_mount_namespace)


def host_mount_namespace() -> int:
    """A descriptor of the calling thread's mount namespace, opened once per process: call it from the
    worker's own thread, which never leaves the host's namespace. Close-on-exec: no command has it."""
    global _host_mounts
    if _host_mounts < 0:
        _host_mounts = os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    return _host_mounts


@dataclass
class MountView:
    """A worker's mount namespace for its sandboxed calls, held by a descriptor (close-on-exec)."""

    fd: int
    writable: tuple[str, ...]
    hidden: tuple[str, ...]
    bound: dict[str, tuple[int, int]]  # each writable directory: (device, inode) of what was bound there
    covers: dict[str, int]  # each hidden directory covered: the device of its tmpfs

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def still_bound(self, host: dict[str, tuple[int, int]]) -> bool:
        """In the view: each writable directory is the host's one now, on a writable mount. (A bind whose
        mount point the host renamed or removed is gone from the view: the path then leads to the
        read-only mount beneath, or to another inode.)"""
        for path, identity in host.items():
            try:
                if self.bound.get(path) != identity or _identity(os.stat(path)) != identity or _read_only(path):
                    return False
            except OSError:
                return False
        return True


def _build_view(writable: Sequence[str], hidden: Sequence[str],
                host: dict[str, tuple[int, int]]) -> MountView:
    """In the calling thread (its own filesystem context): a new mount namespace, read-only but for binds
    of the writable paths."""
    unshare(CLONE_NEWNS)
    mount(None, "/", MS_REC | MS_PRIVATE)  # nothing done here propagates to the host, nor from it
    set_read_only("/", True)
    for path in writable:
        if path in DEVICE_FILES:
            continue  # device files stay writable on a read-only mount (a directory like /dev/shm does not)
        mount(path, path, MS_BIND | MS_REC)
        set_read_only(path, False)
    view = MountView(os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC), tuple(writable),
                     tuple(hidden), {}, {})
    for path, identity in host.items():  # what the binds lead to, read back
        view.bound[path] = identity if _identity(os.stat(path)) == identity else (-1, -1)
    return view


def _missing(path: str, holds: Callable[[str], bool]) -> bool:
    """Whether ``path`` still exists and ``holds`` is not yet true of it (a path gone since it was listed
    needs nothing)."""
    try:
        return not holds(path)
    except (FileNotFoundError, NotADirectoryError):
        return False


def _complete(view: MountView, containers: Iterable[str], protected: Iterable[str], hidden: Iterable[str],
              sockets: Iterable[str]) -> None:
    """In the view: every directory holding protected paths a mount point of itself (shallowest first: a
    bind made again carries what is mounted beneath it), every protected path that exists on a read-only
    mount, every hidden directory covered, every listed host socket covered; each missing one is added now."""
    for path in containers:
        if _missing(path, mount_root):
            mount(path, path, MS_BIND | MS_REC)
    for path in protected:
        if _missing(path, _read_only):
            mount(path, path, MS_BIND | MS_REC)
            set_read_only(path, True)
    for path in hidden:
        try:
            info = os.stat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or view.covers.get(path) == info.st_dev:
            continue
        cover(path)
        view.covers[path] = os.stat(path).st_dev
    for path in sockets:
        try:
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                continue  # covered already, or no socket any more
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            continue  # gone since it was listed, or beyond even this thread's reach (a FUSE mount of a user)
        try:
            mount("/dev/null", path, MS_BIND)
        except FileNotFoundError:
            continue  # gone in between


def enter(*, netns: str, netns_inode: int, mount_view: bool, writable: Sequence[str], protected: Iterable[str],
          hidden: Sequence[str], sockets: Iterable[str], view: MountView | None = None,
          host_mounts: int = -1, host: Mapping[str, tuple[int, int]] | None = None,
          containers: Iterable[str] = ()) -> MountView | None:
    """In the confined thread: its own filesystem context, the session's network, the mount view — ``view``
    (this worker's, from an earlier call) when it still holds, else a new one. Returns the view the thread
    is in (the caller keeps it for the next call; it replaces ``view``, which the caller then closes).
    ``host``: (device, inode) of the writable directories as the host has them now, if the caller has
    just looked (else they are looked up here)."""
    unshare(CLONE_FS)
    if netns:
        join_network(netns, netns_inode)
    if not mount_view:
        return None
    cwd = os.getcwd()
    before = os.stat(".")
    # As the host has them now: the view's binds must lead to the same inodes.
    dirs = [path for path in writable if path not in DEVICE_FILES]
    now = {path: host[path] for path in dirs} if host is not None and all(p in host for p in dirs) else {
        path: _identity(os.stat(path)) for path in dirs}
    entered = None
    if view is not None and view.fd >= 0 and view.writable == tuple(writable) and view.hidden == tuple(hidden):
        _check(_libc.setns(view.fd, CLONE_NEWNS), "setns(mount view)")
        if view.still_bound(now):
            entered = view
        else:  # back to the host's namespace, to build a new view from it
            _check(_libc.setns(host_mounts, CLONE_NEWNS), "setns(host mounts)")
    if entered is None:
        entered = _build_view(writable, hidden, now)
    _complete(entered, containers, protected, hidden, sockets)
    # The thread's working directory still is the directory on the mount beneath the new bind (or, after
    # setns, the view's root); the command must start on the bind (the same directory: device and inode).
    os.chdir(cwd)
    after = os.stat(".")
    if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        raise OSError(f"the working directory {cwd} changed while the sandbox was built")
    return entered


def listen_in(path: str, inode: int, backlog: int = 64) -> socket.socket:
    """A TCP listener on ``127.0.0.1`` (a free port) inside the network namespace at ``path``: a socket
    belongs to the namespace it was created in, whichever thread serves it afterwards."""
    made: list[socket.socket] = []

    def create() -> None:
        join_network(path, inode)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(backlog)
        made.append(listener)

    failed = _in_thread(create)
    if failed is not None:
        raise OSError(getattr(failed, "errno", None), f"cannot listen in the session's network namespace: {failed}")
    return made[0]
