"""The OS sandbox for commands: Landlock (in the kernel, no privileges needed) or bubblewrap (namespaces).

Two processes run it, each its own modules:

* the supervisor decides, once as the session starts, what the session's sandbox is:
  :mod:`~peon.workers.sandbox.probe` (what the kernel offers: Landlock's ABI, a working bwrap) and
  :mod:`~peon.workers.sandbox.decision` (the ``[sandbox]`` configuration made a plan, or refused with
  ``sandbox_unavailable``; the ``"sandbox"`` object a call is approved with);
* the worker confines each command to the approved plan: :mod:`~peon.workers.sandbox.confine` (the
  confined thread, or bwrap; the ruleset, seccomp program and mount view a worker keeps between calls),
  through :mod:`~peon.workers.sandbox.landlock` (the Landlock system calls),
  :mod:`~peon.workers.sandbox.namespaces` (the mount view and the session's network namespace, which
  the supervisor creates) and :mod:`~peon.workers.sandbox.syscall_filter` (the seccomp filter);
* both read :mod:`~peon.workers.sandbox.plan`: what the sandbox allows one command, pure decisions.

The package re-exports the names the tools, the supervisor and ``peon`` use
(``from peon.workers import sandbox``).
"""

from peon.workers.sandbox.confine import (BwrapConfinement, Confinement, LandlockConfinement, confinement_for,
                                          plan_of, resolve, result_summary)
from peon.workers.sandbox.decision import (SandboxUnavailable, cache_dir, call_details, expand, remove_session_cache,
                                           session_status, temp_dir)
from peon.workers.sandbox.probe import (SIMULATE_ENV, BwrapSupport, LandlockSupport, Simulation, probe_bwrap,
                                        probe_landlock)

__all__ = [
    "SIMULATE_ENV", "BwrapConfinement", "BwrapSupport", "Confinement", "LandlockConfinement", "LandlockSupport",
    "SandboxUnavailable", "Simulation", "cache_dir", "call_details", "confinement_for", "expand", "plan_of",
    "probe_bwrap", "probe_landlock", "remove_session_cache", "resolve", "result_summary", "session_status",
    "temp_dir",
]
