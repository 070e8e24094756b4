"""bench/suite/profile_call.py: how a perf sample is given a process role and a kind (no perf needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = """\
peon-worker rea 14449
\t          202790 PyUnicode_DecodeUTF8Stateful (/usr/lib/libpython3.11.so.1.0)
\t    7f2f8de57340 [unknown] ([unknown])

peon-supervisor 14206
\tffffffff813681cf kernel_wait4 ([kernel.kallsyms])
\tffffffff813682e8 __do_sys_wait4 ([kernel.kallsyms])
\tffffffff8225bc41 do_syscall_64 ([kernel.kallsyms])
\t           d3c17 __GI___wait4 (/usr/lib/x86_64-linux-gnu/libc.so.6)

peon-forkserver 14500
\tffffffff81601000 copy_mc_enhanced_fast_string ([kernel.kallsyms])
\tffffffff81602000 do_wp_page ([kernel.kallsyms])
\tffffffff81603000 asm_exc_page_fault ([kernel.kallsyms])
\t          feb22 _PyEval_EvalFrameDefault (/usr/lib/libpython3.11.so.1.0)

peon-forkserver 14209
\tffffffff81604000 copy_page_range ([kernel.kallsyms])
\tffffffff81605000 dup_mmap ([kernel.kallsyms])
\tffffffff81606000 copy_process ([kernel.kallsyms])

peon-worker rea 14449
\tffffffff815fc18b unmap_page_range ([kernel.kallsyms])
\tffffffff8160e1de exit_mmap ([kernel.kallsyms])
\tffffffff81607000 do_exit ([kernel.kallsyms])

bash 14451
\tffffffff8160e1de exit_mmap ([kernel.kallsyms])
\tffffffff816e5449 begin_new_exec ([kernel.kallsyms])
\tffffffff816e35ad bprm_execve ([kernel.kallsyms])

swapper 0
\tffffffff81608000 pv_native_safe_halt ([kernel.kallsyms])
"""


@pytest.fixture
def profile(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(ROOT))
    from bench.suite import profile_call

    return profile_call


def test_samples_get_a_role_by_process_and_title_and_a_kind_by_stack(profile):
    seen = [(profile.role(comm, pid, client=1, supervisor=14206, forkserver=14209), profile.kind(frames))
            for comm, pid, frames in profile.samples(SCRIPT.splitlines())]
    assert seen == [
        ("worker: call and exit", "user"),
        ("supervisor", "syscall wait4"),
        ("worker: fork to warm-up", "page faults"),  # a worker still titled as its forkserver
        ("forkserver", "fork"),
        ("worker: call and exit", "exit"),
        ("other", "exec"),
        ("idle", "other kernel"),
    ]
    assert profile.role("peon-worker peo", 7, 1, 2, 3) == "worker: warm-up"
    assert profile.role("peon-worker sta", 7, 1, 2, 3) == "worker: standby"
    assert profile.role("python", 1, 1, 2, 3) == "client"
