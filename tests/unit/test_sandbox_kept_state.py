"""What a worker keeps from one sandboxed call to the next, checked without a process: a compiled seccomp
program is kept and refuses in the thread that loads it (setuid chmod; the limits, priority and scheduling of
any process but the caller), protected paths are resolved as ``realpath`` resolves
them, and an approved plan read again is the same (a changed one is checked again). The kept mount view
itself, with real sessions, is tests/session/test_sandbox_reuse.py."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from peon.workers.sandbox import syscall_filter
from peon.workers.sandbox.plan import SeccompRules


def test_a_compiled_filter_is_kept_and_refuses_in_the_thread_that_loads_it(tmp_path):
    if syscall_filter.available():
        pytest.skip(syscall_filter.available())
    rules = SeccompRules(special_chmod=True, metadata=True, socket_families=(), inet_stream_only=False)
    compiled = syscall_filter.build(rules)
    assert syscall_filter.build(rules) is compiled  # compiled once per worker and set of rules
    target = tmp_path / "file"
    target.write_text("")
    seen: list[object] = []

    def filtered() -> None:
        compiled.load()
        for attempt in (lambda: os.chmod(target, 0o4755), lambda: os.chown(target, 0, 0),
                        lambda: os.chmod(target, 0o755)):
            try:
                attempt()
                seen.append("ok")
            except OSError as exc:
                seen.append(errno.errorcode[exc.errno])

    thread = threading.Thread(target=filtered)
    thread.start()
    thread.join()
    assert seen == ["EPERM", "EPERM", "ok"]
    os.chmod(target, 0o4755)  # this thread was never filtered
    assert os.stat(target).st_mode & 0o4000


def test_protected_paths_are_resolved_as_realpath_resolves_them(tmp_path):
    from peon.workers.sandbox import resolve

    (tmp_path / "real" / "hooks").mkdir(parents=True)
    (tmp_path / ".git").symlink_to(tmp_path / "real")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    for path in (tmp_path / ".git" / "hooks", tmp_path / "dangling", tmp_path / "missing" / "x", tmp_path):
        assert resolve(str(path)) == os.path.realpath(path)


def test_an_approved_plan_read_again_is_the_same_and_a_changed_one_is_checked_again():
    from peon.workers.sandbox import plan_of
    from peon.workers.sandbox.plan import SandboxPlan

    details = {"active": True, "mode": "auto", **SandboxPlan("landlock", ("/ws",), ("/",), True, True, True,
                                                             abi=6).to_dict()}
    first = plan_of(details)
    assert plan_of(dict(details)) is first  # an equal copy: remembered
    details["writable"].append("relative")  # the caller's dict changed in place: not what was remembered
    with pytest.raises(ValueError, match="absolute paths"):
        plan_of(details)
    assert plan_of({**details, "writable": ["/other"]}).writable == ("/other",)



def test_a_filtered_thread_changes_no_process_but_itself():
    """The filter refuses changing the limits, priority or scheduling of any process but the caller (pid 0,
    its own group): Peon's supervisor, forkserver and worker are other pids. Reading stays allowed."""
    import resource

    if syscall_filter.available():
        pytest.skip(syscall_filter.available())
    compiled = syscall_filter.build(SeccompRules(special_chmod=True, metadata=False, socket_families=(),
                                                 inet_stream_only=False))
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
    nice = os.getpriority(os.PRIO_PROCESS, 0)
    cpus = os.sched_getaffinity(0)
    me = os.getpid()  # the process; its main thread is not the filtered one
    attempts = {
        "prlimit_other": lambda: resource.prlimit(me, resource.RLIMIT_NOFILE, nofile),
        "prlimit_self": lambda: resource.prlimit(0, resource.RLIMIT_NOFILE, nofile),
        "prlimit_read_other": lambda: resource.prlimit(me, resource.RLIMIT_NOFILE),
        "setrlimit": lambda: resource.setrlimit(resource.RLIMIT_NOFILE, nofile),
        "renice_other": lambda: os.setpriority(os.PRIO_PROCESS, me, nice),
        "renice_user": lambda: os.setpriority(os.PRIO_USER, 0, nice),
        "renice_group_other": lambda: os.setpriority(os.PRIO_PGRP, os.getpgid(0), nice),
        "renice_self": lambda: os.setpriority(os.PRIO_PROCESS, 0, nice),
        "renice_own_group": lambda: os.getpriority(os.PRIO_PGRP, 0),
        "priority_other": lambda: os.getpriority(os.PRIO_PROCESS, me),
        "affinity_other": lambda: os.sched_setaffinity(me, cpus),
        "affinity_self": lambda: os.sched_setaffinity(0, cpus),
        "scheduler_other": lambda: os.sched_setscheduler(me, os.SCHED_OTHER, os.sched_param(0)),
        "param_other": lambda: os.sched_setparam(me, os.sched_param(0)),
        "scheduler_self": lambda: os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0)),
    }
    seen: dict[str, str] = {}

    def filtered() -> None:
        compiled.load()
        for name, attempt in attempts.items():
            try:
                attempt()
                seen[name] = "ok"
            except OSError as exc:
                seen[name] = errno.errorcode[exc.errno]

    thread = threading.Thread(target=filtered)
    thread.start()
    thread.join()
    refused = {name for name, outcome in seen.items() if outcome == "EPERM"}
    assert refused == {"prlimit_other", "renice_other", "renice_user", "renice_group_other", "priority_other",
                       "affinity_other", "scheduler_other", "param_other"}, seen
    assert set(seen.values()) == {"ok", "EPERM"}, seen
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == nofile and os.getpriority(os.PRIO_PROCESS, 0) == nice
