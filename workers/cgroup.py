"""cgroup v2: a session's cgroup (its workers below it), killed as a whole with ``cgroup.kill``.

Promise: :func:`probe` says whether this process may create cgroups below its own cgroup v2 and why
not when it may not (no cgroup2 mount, no permission, a kernel without ``cgroup.kill``). A
:class:`Cgroup` kill is atomic with respect to forking: the kernel kills every member, including
ones created while the kill runs. :meth:`Cgroup.kill_and_remove` returns only when the cgroup is
empty and removed, or says it could not within its timeout; it may run from several threads or
processes at once on the same tree (a cgroup that vanishes meanwhile counts as removed).

:func:`remove_leftovers` cleans up after Peon sessions whose supervisor is gone (a supervisor killed
together with its client leaves its cgroup behind, and what a command kept alive in it), on evidence
only: the supervisor's pid is in the cgroup's name, and it is gone when no process has that pid, the
process is a zombie, or the process that has it started after the cgroup was made (a reused pid).
Such a cgroup is removed when empty; when it still holds processes, nothing of its session may run
any more — no supervisor answers for them — so each member is killed with everything below it (a
descendant may have moved itself to another cgroup), signalled through a pidfd opened while it was
in the cgroup (never a pid reused since), then the cgroup's ``cgroup.kill``, and the cgroup removed.
Unless its members are all in another pid namespace, where the pid in the name means another
process: that cgroup is kept. A cgroup whose supervisor may be alive is never touched. A session
abandoned for good is ended too — its supervisor is stopped (``SIGSTOP``) and was orphaned (its
parent is now init: a supervisor's parent is its client, which died). Such a supervisor can never
answer anyone, and continued it would see its client's end closed and exit; it is killed with
everything below it and its cgroup, as its client would have done. :func:`judge_leftover` is the
decision, pure.
"""

from __future__ import annotations

import errno
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal


def cgroup2_mount() -> Path | None:
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                left, _, right = line.partition(" - ")
                if right.split()[:1] == ["cgroup2"]:
                    return Path(left.split()[4])
    except OSError:
        return None
    return None


def own_cgroup_path() -> str | None:
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                hierarchy, _, rest = line.rstrip("\n").partition(":")
                controllers, _, path = rest.partition(":")
                if hierarchy == "0" and controllers == "":
                    return path
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class CgroupSupport:
    available: bool
    parent: Path | None  # where session cgroups are created
    reason: str


def probe() -> CgroupSupport:
    mount = cgroup2_mount()
    if mount is None:
        return CgroupSupport(False, None, "no cgroup2 filesystem is mounted")
    own = own_cgroup_path()
    if own is None:
        return CgroupSupport(False, None, "this process is not in a cgroup v2 hierarchy")
    parent = mount / own.lstrip("/")
    test = parent / f"peon-probe-{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.mkdir(test)
    except OSError as exc:
        return CgroupSupport(False, None, f"cannot create a cgroup in {parent}: {exc.strerror}")
    try:
        if not (test / "cgroup.kill").exists():
            return CgroupSupport(False, None, "the kernel has no cgroup.kill (Linux 5.14 or newer is needed)")
        try:
            with open(test / "cgroup.procs", "w") as f:
                f.write("0")
            with open(parent / "cgroup.procs", "w") as f:
                f.write("0")
        except OSError as exc:
            return CgroupSupport(False, None, f"cannot move processes between cgroups in {parent}: {exc.strerror}")
        return CgroupSupport(True, parent, f"cgroup v2 below {parent}")
    finally:
        try:
            os.rmdir(test)
        except OSError:
            pass


def session_cgroup_name(session_id: str, supervisor_pid: int) -> str:
    """The name of a session's cgroup (below the supervisor's own cgroup), which its client can
    compute too: to clean up after a supervisor that died before it said where its cgroup is."""
    return f"peon-{session_id[:16]}-{supervisor_pid}"


def session_cgroup_path(session_id: str, supervisor_pid: int) -> Path | None:
    """Where a supervisor started by this process made its session cgroup, if cgroup v2 is mounted."""
    mount, own = cgroup2_mount(), own_cgroup_path()
    if mount is None or own is None:
        return None
    return mount / own.lstrip("/") / session_cgroup_name(session_id, supervisor_pid)


def job_cgroup_path(beside: Path, job_id: str) -> Path:
    """The cgroup of a background job run by the session's job host: in the session's cgroup, beside
    ``beside`` (the job host's own cgroup, or any other of the session's workers or its forkserver)."""
    return beside.parent / job_id


class Cgroup:
    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, path: Path) -> Cgroup:
        os.mkdir(path)
        return cls(path)

    def child(self, name: str) -> Cgroup:
        return Cgroup.create(self.path / name)

    def write(self, name: str, value: str, *, missing_ok: bool = False) -> None:
        try:
            with open(self.path / name, "w") as f:
                f.write(value)
        except FileNotFoundError:
            if not missing_ok:
                raise

    def enable_controllers(self, wanted: tuple[str, ...]) -> tuple[str, ...]:
        """Enable what it can of ``wanted`` for this cgroup's children; returns what is enabled."""
        try:
            with open(self.path / "cgroup.controllers") as f:
                available = set(f.read().split())
        except OSError:
            return ()
        enabled = []
        for name in wanted:
            if name in available:
                try:
                    self.write("cgroup.subtree_control", f"+{name}")
                    enabled.append(name)
                except OSError:
                    pass
        return tuple(enabled)

    def add(self, pid: int) -> None:
        with open(self.path / "cgroup.procs", "w") as f:
            f.write(str(pid))

    def all_pids(self) -> list[int]:
        """The members of this cgroup and of every cgroup below it."""
        found: list[int] = []
        for directory, _, _ in os.walk(self.path):
            found.extend(Cgroup(Path(directory)).pids())
        return found

    def pids(self) -> list[int]:
        try:
            with open(self.path / "cgroup.procs") as f:
                return [int(line) for line in f if line.strip()]
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENODEV):
                return []
            raise

    def populated(self) -> bool:
        try:
            with open(self.path / "cgroup.events") as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "populated":
                        return value.strip() == "1"
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENODEV):
                return False
            raise
        return False

    def kill(self) -> None:
        """``cgroup.kill``: the kernel kills every member, also ones forked while it runs. A cgroup
        that is gone (or going: ``ENODEV``) has nothing left to kill."""
        try:
            with open(self.path / "cgroup.kill", "w") as f:
                f.write("1")
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENODEV):
                raise

    def remove_now(self) -> bool:
        """One attempt, never waiting: kill what is inside, remove the tree if it is empty. True when
        the cgroup is gone."""
        if self.populated():
            self.kill()
            return False
        return self._remove_tree()

    def kill_and_remove(self, timeout: float = 5.0) -> bool:
        """Kill every member (and every descendant cgroup's), wait until empty, remove the tree.
        Safe to run from several threads or processes at once on the same tree: whoever removes a
        cgroup first wins, the others see it gone."""
        until = time.monotonic() + timeout
        delay = 0.0002
        while True:
            if self.remove_now():
                return True
            if time.monotonic() >= until:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.01)

    def _remove_tree(self) -> bool:
        """Remove the empty cgroups of this tree, deepest first; False while one is still busy."""
        for directory, _, _ in sorted(os.walk(self.path, topdown=False), key=lambda entry: -len(entry[0])):
            try:
                os.rmdir(directory)
            except FileNotFoundError:
                continue
            except OSError as exc:
                if exc.errno == errno.EBUSY:
                    return False
                if exc.errno == errno.ENODEV:
                    continue
                raise
        return True


# -- leftovers of sessions whose supervisor is gone --------------------------------------------------

# ``peon-<session>-<supervisor pid>`` (session_cgroup_name) and ``peon-probe-<pid>-<ns>`` (probe).
_SESSION_NAME = re.compile(r"^peon-(?P<session>.+)-(?P<pid>[0-9]+)$")
_PROBE_NAME = re.compile(r"^peon-probe-(?P<pid>[0-9]+)-[0-9]+$")
# psutil's start times are computed from the boot time, which /proc gives in whole seconds.
START_TIME_SLACK_SECONDS = 2.0

Owner = Literal["gone", "alive", "reused", "abandoned"]
Verdict = Literal["remove", "end: its supervisor is stopped and its client is gone", "end: its supervisor is gone",
                  "keep: its supervisor may be alive", "keep: it holds processes",
                  "keep: its processes are in another pid namespace", "not Peon's"]


def owner_pid(name: str) -> int | None:
    """The pid of the process that made the cgroup ``name`` (a session's supervisor, or a prober);
    None when the name is not one of Peon's."""
    match = _PROBE_NAME.match(name) or _SESSION_NAME.match(name)
    return int(match["pid"]) if match else None


def judge_leftover(name: str, owner: Owner, populated: bool, visible: bool = True) -> Verdict:
    """What to do with the cgroup ``name``: only when it is Peon's and the process that made it is gone
    (or its pid now names a process started after the cgroup was made), removed when empty and ended
    (its processes killed, then removed) when not — unless ``visible`` is false: none of its members
    is in this process's pid namespace, whose numbers the name's pid is not known to be in."""
    if owner_pid(name) is None:
        return "not Peon's"
    if owner == "abandoned" and _SESSION_NAME.match(name) and not _PROBE_NAME.match(name):
        return "end: its supervisor is stopped and its client is gone"
    if owner == "alive":
        return "keep: it holds processes" if populated else "keep: its supervisor may be alive"
    if not populated:
        return "remove"
    return "end: its supervisor is gone" if visible else "keep: its processes are in another pid namespace"


def owner_state(pid: int, cgroup_made_at: float) -> Owner:
    """Whether the process ``pid``, which made a cgroup at ``cgroup_made_at`` (epoch seconds), lives;
    ``abandoned``: it is a Peon supervisor, stopped, whose parent (its client) is gone."""
    import psutil

    try:
        process = psutil.Process(pid)
        status = process.status()
        if status == psutil.STATUS_ZOMBIE:  # dead, not yet reaped (its parent died with it)
            return "gone"
        started = process.create_time()
        if started > cgroup_made_at + START_TIME_SLACK_SECONDS:
            return "reused"
        if (status == psutil.STATUS_STOPPED and process.ppid() == 1
                and " ".join(process.cmdline()).startswith("peon-supervisor")):
            return "abandoned"
    except psutil.NoSuchProcess:
        return "gone"
    except psutil.Error:
        return "alive"  # cannot tell: keep it
    return "alive"


def in_own_pid_namespace(pids: list[int]) -> bool:
    """Whether one of ``pids`` (a cgroup's members as this process reads them: 0 for one it cannot see)
    is in this process's pid namespace."""
    try:
        own = os.readlink("/proc/self/ns/pid")
    except OSError:
        return False
    for pid in pids:
        if pid <= 0:
            continue
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") == own:
                return True
        except OSError:
            continue
    return False


def kill_members(group: Cgroup) -> None:
    """Kill every member of ``group`` (and of the cgroups below it) with everything below it, each
    signalled first through a pidfd opened while it was in the group (a pid reused since is never
    signalled), then ``cgroup.kill`` for what joined meanwhile."""
    import signal

    from peon.workers import proctree

    root = _named(group.path)
    for pid in group.all_pids():
        if root is None:
            break
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            where = process_cgroup(pid)
            if where is None or not (where == root or where.startswith(root.rstrip("/") + "/")):
                continue  # it left (or its pid names another process now)
            signal.pidfd_send_signal(pidfd, signal.SIGSTOP)  # held: its pid stays its own while it is killed
            proctree.kill_tree(pid, include_root=True, timeout=5.0)
        except OSError:
            continue
        finally:
            os.close(pidfd)
    group.kill()


def process_cgroup(pid: int) -> str | None:
    """The cgroup v2 path of ``pid`` as ``/proc/<pid>/cgroup`` names it (from the root of the hierarchy
    this process sees), None if it is gone."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].rstrip("\n")
    except OSError:
        return None
    return None


def _named(path: Path) -> str | None:
    """``path``, a cgroup directory, as :func:`process_cgroup` names it."""
    mount = cgroup2_mount()
    if mount is None:
        return None
    try:
        return "/" + str(path.relative_to(mount)).removeprefix(".").strip("/")
    except ValueError:
        return None


@dataclass
class LeftoverReport:
    removed: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)  # sessions abandoned or whose supervisor is gone: killed, removed
    kept: dict[str, str] = field(default_factory=dict)  # name -> why
    failed: dict[str, str] = field(default_factory=dict)  # name -> the error


def remove_leftovers(parent: Path) -> LeftoverReport:
    """Clean up the cgroups below ``parent`` that Peon sessions (or probes) left when their supervisor
    died: remove the empty ones, end the populated ones (:func:`kill_members`) and the abandoned
    sessions; say what was kept and why. Kills no process of a session whose supervisor may be alive."""
    report = LeftoverReport()
    try:
        names = sorted(entry.name for entry in os.scandir(parent) if entry.is_dir(follow_symlinks=False)
                       and entry.name.startswith("peon-"))
    except OSError as exc:
        report.failed[str(parent)] = exc.strerror or str(exc)
        return report
    for name in names:
        pid = owner_pid(name)
        if pid is None:
            continue
        group = Cgroup(parent / name)
        try:
            made_at = os.stat(group.path).st_ctime  # cgroupfs: set when the directory is made
            owner, populated = owner_state(pid, made_at), group.populated()  # populated: below it too
            visible = not populated or in_own_pid_namespace(group.all_pids())
            verdict = judge_leftover(name, owner, populated, visible)
            if verdict.startswith("end:"):
                if owner == "abandoned":
                    from peon.workers import proctree

                    proctree.kill_tree(pid, include_root=True, timeout=5.0)
                kill_members(group)
                if group.kill_and_remove():
                    report.ended.append(name)
                else:
                    report.failed[name] = "its session was killed but its cgroup did not empty"
            elif verdict != "remove":
                report.kept[name] = verdict
            elif group._remove_tree():
                report.removed.append(name)
            else:
                report.kept[name] = "keep: it holds processes"  # one joined meanwhile
        except FileNotFoundError:
            continue  # removed meanwhile (its client, another session)
        except OSError as exc:
            report.failed[name] = exc.strerror or str(exc)
    return report
