"""``peon doctor``: the facts about this machine that matter to Peon, and whether a session can start.

Promises:

* ``peon doctor`` resolves each agent exactly as its adapter does, and exits 0 when a session can
  start, 2 when the configuration is invalid or refused, 1 when the session fails for another reason
  (a missing writable temporary directory is a fact it shows, with the fix, never a traceback);
* ``peon doctor --clean`` first removes the empty cgroups of Peon sessions whose supervisor is gone
  (never a live session's, never one that holds a process) and ends sessions abandoned for good (a
  stopped supervisor whose client is gone), then ends Peon's processes abandoned for good that no cgroup
  holds (:mod:`peon.workers.orphans`), and lists what it removed, ended and kept;
* it reports, per agent client found on this machine (Claude Code, Codex, Cursor, VS Code), where Peon is
  registered and whether the client's own file and shell tools are still on (``peon setup`` changes both);
* a probe that fails is a fact it shows, never a crash.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from peon.cli.common import USAGE_ERROR, config_argument, describe_os_error, one_shot, open_session


def probe_subreaper() -> dict[str, Any]:
    """Whether this kernel lets a process become a child subreaper (tried in a throwaway child)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child only reports through its exit status
        try:
            from peon.workers import linux

            linux.set_child_subreaper()
            os._exit(0 if linux.is_child_subreaper() else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return {"supported": code == 0, "detail": "PR_SET_CHILD_SUBREAPER works" if code == 0 else
            "PR_SET_CHILD_SUBREAPER failed; orphaned descendants would escape to init"}


def probe_tempdir() -> dict[str, Any]:
    """The temporary directory commands would get (``tempfile``'s choice), or why there is none. A session itself
    needs none: its channels are inherited socket pairs."""
    import tempfile

    try:
        directory = tempfile.gettempdir()
    except OSError as exc:  # no candidate (TMPDIR, /tmp, /var/tmp, /usr/tmp, the current directory) is writable
        return {"writable": False, "detail": f"{exc.strerror or exc}; set TMPDIR to a writable directory"}
    return {"writable": True, "detail": directory}


def probe_openat2() -> dict[str, Any]:
    from peon.workers.fs import openat2_available

    try:
        value = openat2_available()
    except Exception as exc:  # a probe failure is a fact to show, not a crash
        return {"available": "unknown", "detail": f"the probe failed: {exc}"}
    return {"available": bool(value), "detail": "RESOLVE_BENEATH path resolution" if value else
            "not available (the kernel or a seccomp filter refuses it)"}


def config_layers(options: argparse.Namespace, session_layers: Any) -> dict[str, Any]:
    """The layers the session resolved (or, when it could not start, what loading them says)."""
    if session_layers:
        return {"layers": list(session_layers)}
    from peon.client.config import load_config
    from peon.core.errors import ConfigError

    try:
        loaded = load_config(config_argument(options.config, None), workspace=Path(options.workspace).expanduser())
    except ConfigError as exc:
        return {"error": exc.message, "layers": []}
    return {"layers": loaded.describe_layers()}


def agent_facts(workspace: Path, config: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """Each agent adapter's resolution in this session, by the adapter itself (what it would start)."""
    from peon.core.config_view import ConfigView
    from peon.core.errors import PeonError
    from peon.core.tool import SessionView
    from peon.tools.shared.agent import AgentTool
    from peon.tools import BUILTIN_TOOLS

    view = SessionView(workspace=workspace, config=ConfigView.from_dict(config), env=env)
    agents: dict[str, Any] = {}
    for tool_class in BUILTIN_TOOLS:
        if not issubclass(tool_class, AgentTool):
            continue
        tool = tool_class()
        command = config["agents"][tool.agent]
        entry: dict[str, Any] = {"tool": tool.name, "executable": command["executable"], "args": list(command["args"])}
        try:
            invocation = tool.resolve(view, with_hash=False)
        except PeonError as exc:
            entry.update(resolved=None, error=f"{exc.code.value}: {exc.message}")
        else:
            entry.update(resolved=invocation.executable, interpreter=invocation.program.interpreter,
                         argv=[*invocation.argv[:-1], "<prompt>"], **invocation.facts)
        agents[tool.agent] = entry
    return agents


def agent_control_facts(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The agent-control list the session read (``sandbox.protected``): what the file tools ask about, and
    the paths the sandbox plan covers for commands (:mod:`peon.core.agent_control`)."""
    from peon.core.agent_control import command_paths

    protected = (config.get("sandbox") or {}).get("protected")
    if not isinstance(protected, (list, tuple)):
        return None
    return {"file_tools": list(protected), "commands": list(command_paths(protected))}


def cmd_doctor(options: argparse.Namespace) -> int:
    from peon.core.errors import ConfigError, PeonError
    from peon.workers import cgroup, orphans

    facts: dict[str, Any] = {
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "kernel": {"release": platform.release(), "machine": platform.machine()},
        "subreaper": probe_subreaper(),
        "openat2": probe_openat2(),
        "tempdir": probe_tempdir(),
    }
    support = cgroup.probe()
    facts["cgroup_v2"] = {"available": support.available, "detail": support.reason}
    if options.clean:
        facts["leftover_cgroups"] = clean_leftover_cgroups(support)
        facts["abandoned_processes"] = orphans.end_abandoned()
    agents: dict[str, Any] = {}
    session_layers = None
    session_sandbox: dict[str, Any] | None = None
    code = 0
    try:
        with one_shot(open_session(options), options) as session:
            info = session.info
        session_sandbox = info.get("sandbox")
        facts["containment"] = info.get("containment")
        facts["redaction"] = info.get("redaction")
        session_layers = info.get("config_layers")
        agents = agent_facts(Path(info.get("workspace") or options.workspace), info.get("config") or {}, os.environ)
        facts["agent_control"] = agent_control_facts(info.get("config") or {})
    except ConfigError as exc:
        facts["containment"] = {"error": f"{exc.code.value}: {exc.message}"}
        session_sandbox = {"error": f"{exc.code.value}: {exc.message}"}
        code = USAGE_ERROR
    except PeonError as exc:
        facts["containment"] = {"error": f"{exc.code.value}: {exc.message}"}
        session_sandbox = {"error": f"{exc.code.value}: {exc.message}"}
        code = 1
    except OSError as exc:  # the session could not even be launched (no temporary directory, ...)
        facts["containment"] = {"error": describe_os_error(exc)}
        session_sandbox = {"error": describe_os_error(exc)}
        code = 1
    facts["agents"] = agents
    facts["clients"] = client_facts(Path(options.workspace).expanduser().resolve())
    facts["sandbox"] = sandbox_facts(session_sandbox)
    facts["config"] = config_layers(options, session_layers)
    if options.json:
        print(json.dumps(facts, indent=2))
    else:
        print_doctor(facts)
    if code:
        print("peon: a session cannot start here; see above", file=sys.stderr)
    return code


def client_facts(workspace: Path) -> list[dict[str, Any]]:
    """Each agent client on this machine: where Peon is registered, and whether its own tools are off."""
    from peon.cli.clients.registry import status

    return [found.to_dict() for found in status(workspace, Path.home(), os.environ)]


def clean_leftover_cgroups(support: Any) -> dict[str, Any]:
    """``peon doctor --clean``: remove the empty cgroups of sessions whose supervisor is gone, and end (kill,
    then remove) those still holding processes and those of sessions abandoned for good."""
    from peon.workers import cgroup

    if support.parent is None:
        return {"parent": None, "removed": [], "ended": [], "kept": {}, "failed": {}, "detail": support.reason}
    report = cgroup.remove_leftovers(support.parent)
    return {"parent": str(support.parent), "removed": report.removed, "ended": report.ended, "kept": report.kept,
            "failed": report.failed}


def print_doctor(facts: Mapping[str, Any]) -> None:
    py, kernel = facts["python"], facts["kernel"]
    print(f"python       {py['version']} ({py['executable']})")
    print(f"kernel       Linux {kernel['release']} {kernel['machine']}")
    containment = facts.get("containment") or {}
    if "error" in containment:
        print(f"containment  session failed to start: {containment['error']}")
    else:
        print(f"containment  {containment.get('kind')}: {containment.get('description')}")
        print(f"limits       {containment.get('limits')}")
    cg = facts["cgroup_v2"]
    print(f"cgroup v2    {'yes' if cg['available'] else 'no'}: {cg['detail']}")
    if "leftover_cgroups" in facts:
        left = facts["leftover_cgroups"]
        if left["parent"] is None:
            print(f"clean        nothing to clean: {left['detail']}")
        else:
            print(f"clean        removed {len(left['removed'])} leftover cgroup(s) in {left['parent']}"
                  + "".join(f"\n  removed    {name}" for name in left["removed"])
                  + "".join(f"\n  ended      {name} (its processes killed: no supervisor answers for them)"
                            for name in left["ended"])
                  + "".join(f"\n  kept       {name} ({why})" for name, why in left["kept"].items())
                  + "".join(f"\n  failed     {name}: {why}" for name, why in left["failed"].items()))
    if "abandoned_processes" in facts:
        ended = facts["abandoned_processes"]
        print(f"clean        ended {len(ended)} Peon process(es) abandoned for good (stopped, their session's client "
              f"and supervisor gone)" + "".join(f"\n  ended      {what}" for what in ended))
    sub = facts["subreaper"]
    print(f"subreaper    {'yes' if sub['supported'] else 'no'}: {sub['detail']}")
    o2 = facts["openat2"]
    shown = o2["available"] if isinstance(o2["available"], str) else ("yes" if o2["available"] else "no")
    print(f"openat2      {shown}: {o2['detail']}")
    tmp = facts["tempdir"]
    print(f"temp dir     {'yes' if tmp['writable'] else 'no'}: {tmp['detail']}")
    print_sandbox(facts["sandbox"])
    print_redaction(facts.get("redaction"))
    control = facts.get("agent_control")
    if control:
        listed = ", ".join(control["file_tools"])
        print(f"agent-control write, edit and apply_patch ask before writing beneath: {listed} "
              "(sandbox.protected; for commands, the sandbox's lines above)")
    print("agents")
    for name, agent in facts["agents"].items():
        if agent["resolved"] is None:
            print(f"  {name:<10} {agent['executable']}: {agent['error']}")
            continue
        runs = f" (run by {agent['interpreter']})" if agent.get("interpreter") else ""
        print(f"  {name:<10} {agent['executable']} -> {agent['resolved']}{runs}")
        print(f"  {'':<10} argv: {' '.join(agent['argv'])}")
        if "pi_version" in agent:
            dash = "ends options with --" if agent["pi_double_dash"] else "no --; prompts beginning with - are refused"
            print(f"  {'':<10} pi {agent['pi_version'] or 'of unknown version'}: {dash}")
    print_clients(facts["clients"])
    print("config layers")
    config = facts["config"]
    if config.get("error"):
        print(f"  error: {config['error']}")
    for layer in config["layers"]:
        keys = layer["keys"]
        summary = ", ".join(keys) if len(keys) <= 8 else ", ".join(keys[:8]) + f", … ({len(keys)} keys)"
        kind = f" ({layer['kind']})" if layer.get("kind") and layer["kind"] != layer["source"] else ""
        print(f"  {layer['source']}{kind}: {summary or '(no keys)'}")


def print_redaction(redaction: Mapping[str, Any] | None) -> None:
    if not redaction:
        return
    if not redaction.get("enabled"):
        print("redaction    off ([redaction] enabled = false): output, logs and audit lines keep credentials")
        return
    scanner = redaction.get("engine") or "?"
    how = "one Hyperscan pass finds every format's candidates" if scanner == "hyperscan" else \
        f"pure-Python scanner, one pass per format (about 10x the CPU on large output): {scanner}"
    print(f"redaction    on: {how}")


def print_clients(clients: list[Mapping[str, Any]]) -> None:
    print("clients" + ("" if clients else "      none found (peon setup registers Peon with one)"))
    for client in clients:
        where = [f"{scope}: {path}" for scope, path in client["registered"].items() if path]
        print(f"  {client['client']:<12} {client['found']}")
        print(f"  {'':<12} peon: {'registered (' + '; '.join(where) + ')' if where else 'not registered'}")
        print(f"  {'':<12} built-in tools: {client['builtins']}")


def sandbox_facts(session: Mapping[str, Any] | None) -> dict[str, Any]:
    """The session's sandbox decision, and what this machine offers for each kind, with known fixes."""
    from peon.core.errors import PeonError
    from peon.workers import sandbox

    try:
        simulate = sandbox.Simulation.parse(os.environ.get(sandbox.SIMULATE_ENV, ""))
    except PeonError as exc:
        return {"session": session, "error": exc.message}
    from peon.workers.sandbox import namespaces, syscall_filter

    layers = {"namespaces": "reported unavailable" if simulate.no_namespaces else namespaces.probe(),
              "seccomp": "reported unavailable" if simulate.no_seccomp else syscall_filter.available()}
    landlock = sandbox.probe_landlock(simulate).to_dict()
    return {"session": session, "landlock": landlock,
            "egress": egress_confinement(not layers["namespaces"], int(landlock.get("abi") or 0)),
            "bwrap": sandbox.probe_bwrap(os.environ, simulate).to_dict(),
            "namespaces": {"available": not layers["namespaces"],
                           "detail": layers["namespaces"] or "mount view and private network namespace per session",
                           "fixes": [] if not layers["namespaces"] else
                           ["run Peon as root (CAP_SYS_ADMIN), or use sandbox.kind = \"bwrap\""]},
            "seccomp": {"available": not layers["seccomp"], "detail": layers["seccomp"] or "libseccomp loaded",
                        "fixes": [] if not layers["seccomp"] else ["install libseccomp2"]}}


def egress_confinement(namespaces: bool, abi: int) -> dict[str, Any]:
    """What keeps a command's connections to the egress proxy of ``sandbox.network = [hosts]`` on this machine:
    the session's network namespace (root), else Landlock TCP rules (ABI 4), else nothing (no network)."""
    from peon.workers.sandbox.landlock import NET_ABI

    if namespaces:
        return {"available": True, "by": "network namespace", "fixes": [],
                "detail": "the session's private network namespace: the proxy is the only way out, for TCP and "
                          "for every other protocol"}
    fixes = ["run Peon as root (CAP_SYS_ADMIN) for the session's network namespace"]
    if abi >= NET_ABI:
        return {"available": True, "by": f"Landlock TCP rules (ABI {abi})", "fixes": fixes,
                "detail": f"Landlock TCP rules (ABI {abi}) let commands connect to the proxy's port on the host's "
                          "loopback only, and seccomp keeps them off UDP; the rules name ports, not hosts: that "
                          "port number of another host is reachable too"}
    return {"available": False, "by": None, "fixes": fixes,
            "detail": f"no private network namespace and no Landlock TCP rules (they need ABI {NET_ABI}, Linux 6.7; "
                      f"this kernel: ABI {abi}): sandbox.network = [hosts] means no network at all"}


def describe_sandbox(status: Mapping[str, Any] | None) -> str:
    if not status:
        return "unknown: the session did not start"
    if "error" in status:
        return f"the session did not start: {status['error']}"
    mode = status.get("mode")
    if not status.get("active"):
        return f"{mode}: not sandboxed ({status.get('reason')})"
    plan = status["plan"]
    kind = f"landlock ABI {plan['abi']}" if plan["kind"] == "landlock" else f"bwrap ({plan['bwrap']})"
    egress = status.get("egress")
    network = "on" if plan["network"] else f"only {', '.join(egress['allow'])} (proxy)" if egress else "off"
    text = (f"{mode}: {kind}; layers {' + '.join(status.get('layers') or [plan['kind']])}; writes beneath "
            f"{', '.join(plan['writable'])}; reads beneath {', '.join(plan['readable'])}; network {network}")
    for line in status.get("enforced") or ():
        text += f"\n               enforced: {line}"
    for line in status.get("not_enforced") or ():
        text += f"\n               NOT enforced: {line}"
    return text


def print_sandbox(facts: Mapping[str, Any]) -> None:
    print(f"sandbox      {describe_sandbox(facts.get('session'))}")
    if facts.get("error"):
        print(f"  error: {facts['error']}")
        return
    for name in ("landlock", "bwrap", "namespaces", "seccomp", "egress"):
        probe = facts[name]
        print(f"{name:<12} {'yes' if probe['available'] else 'no'}: {probe['detail']}")
        for fix in probe["fixes"]:
            print(f"               fix: {fix}")
