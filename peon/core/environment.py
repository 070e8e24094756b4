"""The environment every command and agent runs with (pure: no I/O).

Promises:

* :func:`command_environment` is the one place that builds it; ``bash`` and every agent adapter use
  it, for the process they start and for everything they check against it (the agent's executable
  is resolved through the ``PATH`` it returns, the ``ARG_MAX`` check counts it);
* it is the session's environment with the ``[environment]`` table applied on top: a string value
  replaces whatever the session inherited — so an inherited ``EDITOR=vim`` or ``PAGER=less`` cannot make
  a command wait on a person — and ``false`` leaves the inherited value (or its absence) untouched.
  The shipped defaults turn pagers into ``cat``, make editors fail at once (``false``), make vi/vim run
  directly quit instead of reading keys from stderr (Peon's output pipe: vim takes its keys from there
  when stdin is not a terminal, and would wait for the deadline) and switch off credential and
  confirmation prompts; the user's configuration (never a project's) may change any of them, and its
  explicit settings win;
* ``PATH`` keeps only its absolute entries, in order: an empty or relative entry means "look in the
  current directory", which for every command is the workspace, so a repository could otherwise
  supply the ``git``, ``node`` or ``claude`` that runs. When no absolute entry is left (or the session
  has no ``PATH``), it is the POSIX default ``/bin:/usr/bin`` — an unset ``PATH`` would not do: bash's
  built-in default ends with ``.``;
* when the session's OS sandbox is active and has a cache directory (``sandbox.caches``), the caches and
  homes of common tools (npm, pip, XDG, cargo, go, uv, yarn, pnpm) point beneath it, each only when
  neither the session's environment nor ``[environment]`` names it already; with an egress allowlist
  (``sandbox.network = [hosts...]``), ``HTTP(S)_PROXY`` name the session's proxy and ``NO_PROXY`` the
  command's own loopback, whatever the session had; with ``sandbox.network = false``, package managers
  are put in their offline modes (:data:`OFFLINE`) unless the session set those variables;
* ``login_profile`` in ``[environment]`` is a setting, never a variable: ``true`` (the default) runs
  commands with ``bash -lc`` (the user's login profile is read first), ``false`` with ``bash -c`` and
  Peon's own clean profile — this environment, with no file sourced: ``BASH_ENV`` and ``ENV`` are dropped
  unless ``[environment]`` sets them (:func:`shell_flag`).
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any
from collections.abc import Mapping

if TYPE_CHECKING:
    from peon.core.tool import SessionView

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LOGIN_PROFILE = "login_profile"  # the [environment] key that is a setting (a boolean), not a variable
STARTUP_FILES = ("BASH_ENV", "ENV")  # what a non-login bash -c (or sh) would source


def login_profile(settings: Mapping[str, str | bool]) -> bool:
    """Whether commands read the user's login profile (``[environment] login_profile``, true by default)."""
    return settings.get(LOGIN_PROFILE) is not False


def shell_flag(settings: Mapping[str, str | bool]) -> str:
    """``-lc`` (a login shell: the profile is read), or ``-c`` when ``login_profile = false``."""
    return "-lc" if login_profile(settings) else "-c"


def split_search_path(path: str) -> tuple[list[str], list[str]]:
    """(absolute directories in order, ignored relative entries) of a ``PATH`` value."""
    absolute: list[str] = []
    relative: list[str] = []
    for entry in path.split(os.pathsep):
        (absolute if os.path.isabs(entry) else relative).append(entry)
    return absolute, relative


def build_environment(inherited: Mapping[str, str], settings: Mapping[str, str | bool]) -> dict[str, str]:
    """``inherited`` with ``settings`` applied (a string sets, ``False`` keeps) and ``PATH`` made absolute."""
    env = dict(inherited)
    if not login_profile(settings):  # Peon's clean profile: no startup file unless [environment] names one
        for name in STARTUP_FILES:
            env.pop(name, None)
    for name, value in settings.items():
        if isinstance(value, str) and name != LOGIN_PROFILE:
            env[name] = value
    # No PATH, or none that is absolute, would leave the search to the program: bash's built-in
    # default ends with ".", the workspace. The POSIX default is used instead.
    env["PATH"] = os.pathsep.join(split_search_path(env.get("PATH", ""))[0]) or os.defpath
    return env


TRACE_VARIABLES = {"traceparent": "TRACEPARENT", "tracestate": "TRACESTATE"}
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_TRACESTATE = re.compile(r"[\x20-\x7e]{0,512}")


def trace_context(value: Any) -> dict[str, str]:
    """The W3C trace context a call carries (``traceparent``, ``tracestate``), checked: anything else, or
    a malformed value, is dropped, so a client cannot put arbitrary text into a command's environment."""
    if not isinstance(value, Mapping):
        return {}
    parent = value.get("traceparent")
    if not isinstance(parent, str) or not _TRACEPARENT.fullmatch(parent):
        return {}
    out = {"traceparent": parent}
    state = value.get("tracestate")
    if isinstance(state, str) and _TRACESTATE.fullmatch(state):
        out["tracestate"] = state
    return out


def command_environment(session: SessionView, trace: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a command or agent started in ``session`` (a :class:`peon.core.tool.SessionView`);
    a call's trace context becomes ``TRACEPARENT``/``TRACESTATE``, so tools that speak OpenTelemetry join
    the caller's trace."""
    env = build_environment(session.env, session.config.environment)
    for key, value in trace_context(trace).items():
        env[TRACE_VARIABLES[key]] = value
    status = session.sandbox
    caches = status.get("cache_dir") if status.get("active") else None
    if isinstance(caches, str) and os.path.isabs(caches):
        env.update(cache_environment(caches, env))
    egress = status.get("egress") if status.get("active") else None
    proxy = egress.get("proxy") if isinstance(egress, dict) else None
    if isinstance(proxy, str):
        env.update(proxy_environment(proxy))
    plan = status.get("plan") if status.get("active") else None
    if isinstance(plan, dict) and plan.get("network") is False and proxy is None:
        env.update({name: value for name, value in OFFLINE.items() if name not in env})
    return env


# With sandbox.network = false nothing can be fetched: package managers are told so (unless the session set
# these), and fail at once with their own "offline" error instead of retrying for tens of seconds.
OFFLINE = {"PIP_RETRIES": "0", "npm_config_offline": "true", "UV_OFFLINE": "1", "CARGO_NET_OFFLINE": "true",
           "GOPROXY": "off", "YARN_ENABLE_OFFLINE_MODE": "1"}


# Local addresses stay direct: inside the sandbox they are the command's own loopback.
NO_PROXY = "localhost,127.0.0.1,::1"


def proxy_environment(proxy: str) -> dict[str, str]:
    """The variables that send a command's HTTP(S) traffic through the session's egress proxy: set
    whatever the session had, since the proxy is the only way out of the sandbox."""
    return {"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy,
            "NO_PROXY": NO_PROXY, "no_proxy": NO_PROXY}


# Tool caches and homes pointed at the sandbox's cache directory unless the environment names them.
CACHE_VARIABLES = {"npm_config_cache": "npm", "PIP_CACHE_DIR": "pip", "XDG_CACHE_HOME": "xdg", "CARGO_HOME": "cargo",
                   "GOCACHE": "go-build", "GOMODCACHE": "go-mod", "UV_CACHE_DIR": "uv",
                   "YARN_CACHE_FOLDER": "yarn", "pnpm_config_store_dir": "pnpm-store"}


def cache_environment(cache_dir: str, env: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to ``env`` so tool caches live beneath ``cache_dir``: only those not set."""
    out = {name: f"{cache_dir}/{sub}" for name, sub in CACHE_VARIABLES.items() if not env.get(name)}
    if "npm_config_update_notifier" not in env:
        out["npm_config_update_notifier"] = "false"  # it writes beneath ~/.config, read-only in the sandbox
    return out


def search_path(env: Mapping[str, str]) -> str:
    """The ``PATH`` a program looked up by name is searched in, with the POSIX default when unset."""
    return env.get("PATH") or os.defpath
