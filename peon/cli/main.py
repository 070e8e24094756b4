"""The ``peon`` command line: ``mcp``, ``serve``, ``call``, ``tools``, ``skills``, ``doctor`` and ``--version``.

Promises:

* bad usage (unknown flags, input that is not JSON, a missing workspace, an invalid configuration)
  ends with one clear sentence on stderr and exit status 2, never a traceback;
* ``peon call`` exits 0 when the call succeeded and 1 when it failed; it prints the result as JSON when
  stdout is not a terminal or with ``--json``, and for a person on a terminal the output followed by
  one status line (exit status, duration, truncation) — :func:`render_result`, pure; it names no job,
  since a one-shot call's jobs and their retained output end with its session;
* when a person is at the terminal (stdin or stderr is one, and there is a controlling terminal) the
  approval prompt is asked on ``/dev/tty``, also when stdout is piped (``peon call ... | jq``); it
  offers only "allow once" and "deny", since the session ends with the call;
* Ctrl-C while the session starts stops ``peon call`` cleanly (exit 130, no traceback, nothing left
  running) once the session is up; a second Ctrl-C does not wait;
* ``peon doctor`` resolves each agent exactly as its adapter does, and exits 0 when a session can
  start, 2 when the configuration is invalid or refused, 1 when the session fails for another reason
  (a missing writable temporary directory is a fact it shows, with the fix, never a traceback);
  ``peon doctor --clean`` first removes the empty cgroups of Peon sessions whose supervisor is gone
  (never a live session's, never one that holds a process) and ends sessions abandoned for good (a
  stopped supervisor whose client is gone), and lists what it removed, ended and kept;
* an operating-system error that stops a command (no such interpreter, ...) is one sentence on stderr
  and exit status 1;
* every session a command opens is closed, with everything it started, before the command exits.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import threading
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any
from collections.abc import Callable, Mapping

from peon.core.risk import RISK_NAMES

if TYPE_CHECKING:
    from peon.client.session import Session

USAGE_ERROR = 2


class UsageError(Exception):
    """Bad input from the person at the command line (exit status 2)."""


# -- configuration ---------------------------------------------------------------------------------


def config_argument(path: str | None, allow: list[str] | None) -> Any:
    """What to hand to :class:`peon.Session`: the file, the ``--allow`` overrides, or both merged."""
    overrides = {"approval": {risk: "allow" for risk in allow}} if allow else None
    if path is None:
        return overrides
    config_path = Path(path).expanduser()
    if overrides is None:
        return str(config_path)
    from peon.client.config import load_config, merge, read_toml

    load_config(config_path)  # reports a bad file by its own name before the overrides are merged in
    return merge(read_toml(config_path) or {}, overrides)


def open_session(options: argparse.Namespace, **kwargs: Any) -> Session:
    import peon

    workspace = Path(options.workspace).expanduser()
    if not workspace.is_dir():
        raise UsageError(f"workspace {workspace} is not an existing directory")
    return peon.Session(workspace, config_argument(options.config, getattr(options, "allow", None)), **kwargs)


# -- peon mcp --------------------------------------------------------------------------------------


def cmd_mcp(options: argparse.Namespace) -> int:
    from peon.client.spawn import launch

    # The supervisor's interpreter starts now, while this one loads the MCP server: the two start-ups
    # overlap, and the session adopts the process (it starts its own if anything here differs).
    workspace = Path(options.workspace).expanduser().resolve()
    early = launch(workspace) if workspace.is_dir() else None
    try:
        import peon
        from peon.mcp.protocol import ServerIdentity
        from peon.mcp.stdio import serve

        identity = ServerIdentity(
            name="peon", version=peon.__version__, title="Peon",
            instructions=(f"Peon runs these tools in the workspace {workspace}. Every call is validated, risk-rated "
                          "and approved, runs in its own worker with bounded time and output, and everything it "
                          "started is killed when it ends. Process tools are not sandboxed unless the session's "
                          "OS sandbox is on (their approval details and results say so)."),
        )
        return serve(lambda approver: open_session(options, approver=approver, launch=early), identity)
    finally:
        if early is not None:
            early.abandon()  # a no-op once the session adopted it


# -- peon serve ------------------------------------------------------------------------------------


def cmd_serve(options: argparse.Namespace) -> int:
    from peon.serve.options import ServeUsageError, command

    try:
        return command(options)
    except ServeUsageError as exc:
        raise UsageError(str(exc)) from None


# -- peon call -------------------------------------------------------------------------------------


def has_controlling_terminal() -> bool:
    try:
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC))
    except OSError:
        return False
    return True


def terminal_approver() -> Callable[[dict[str, Any]], Any] | None:
    """The interactive approver when a person is at the terminal — stdin or stderr is one, whatever
    stdout is (it may be piped to jq) — and there is a controlling terminal to ask on; otherwise none
    (the policy decides, and "ask" means deny)."""
    if not (sys.stdin.isatty() or sys.stderr.isatty()) or not has_controlling_terminal():
        return None
    from peon.approvers import TerminalApprover

    return TerminalApprover(offer_session=False)  # `peon call` ends its session with its one call


PROGRESS_LINE_CHARS = 60  # of the newest output line, after the elapsed time and the output size


class ProgressLine:
    """A live status line on a terminal's stderr while a call runs (updates come from a Peon thread)."""

    def __init__(self, tool: str, enabled: bool):
        self.tool = tool
        self.enabled = enabled
        self.shown = False
        self._lock = threading.Lock()

    def update(self, update: Mapping[str, Any]) -> None:
        elapsed = float(update.get("elapsed_ms", 0)) / 1000
        output = update.get("output_bytes")
        text = f"{self.tool}: running for {elapsed:.1f} s"
        if isinstance(output, int):
            text += f", {human_bytes(output)} of output"
        lines = update.get("lines")
        if isinstance(lines, list) and lines and isinstance(lines[-1], str):
            newest = "".join(ch for ch in lines[-1] if ch.isprintable())[:PROGRESS_LINE_CHARS]
            if newest.strip():
                text += f" · {newest}"
        with self._lock:
            if self.enabled:
                sys.stderr.write(f"\r\x1b[K{text}")
                sys.stderr.flush()
                self.shown = True

    def clear(self) -> None:
        """Erase the line; later updates are not shown."""
        with self._lock:
            self.enabled = False
            if self.shown:
                sys.stderr.write("\r\x1b[K")
                sys.stderr.flush()
                self.shown = False


def human_bytes(count: int) -> str:
    if count < 1024:
        return f"{count} bytes"
    if count < 1 << 20:
        return f"{count / 1024:.1f} KiB"
    return f"{count / (1 << 20):.1f} MiB"


def parse_arguments(text: str) -> Any:
    if text == "-":
        text = sys.stdin.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"the tool input is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}): "
                         f"{text[:80]!r}") from None


class DeferredInterrupt:
    """Hold a first Ctrl-C while a session starts, so the start completes and the session is closed
    cleanly instead of abandoning a supervisor half-way (which would then write to a closed channel)."""

    def __init__(self) -> None:
        self.interrupted = False
        self._previous: Any = None

    def __enter__(self) -> DeferredInterrupt:
        self._previous = signal.signal(signal.SIGINT, self._on_interrupt)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGINT, self._previous)

    def _on_interrupt(self, signum: int, frame: types.FrameType | None) -> None:
        if self.interrupted:
            raise KeyboardInterrupt  # the second Ctrl-C does not wait
        self.interrupted = True
        sys.stderr.write("peon: interrupted; stopping as soon as the session has started (Ctrl-C again to "
                         "stop now)\n")
        sys.stderr.flush()


def cmd_call(options: argparse.Namespace) -> int:
    arguments = parse_arguments(options.input)
    as_json = options.json or not sys.stdout.isatty()
    progress = ProgressLine(options.tool, sys.stderr.isatty())
    with DeferredInterrupt() as starting:
        session = open_session(options, approver=terminal_approver())
    with session:
        if starting.interrupted:
            return 130
        handle = session.submit(options.tool, arguments, on_progress=progress.update)
        interrupted = False
        try:
            result = handle.result()
        except KeyboardInterrupt:  # Ctrl-C cancels the call (TERM → 2 s → KILL) and still reports it
            interrupted = True
            progress.clear()
            sys.stderr.write("peon: cancelling the call\n")
            handle.cancel()
            result = handle.result()
        progress.clear()
    if result.ok and isinstance(result.value, dict) and result.value.get("background") \
            and result.value.get("state") == "running":
        # A one-shot call's session ends with this command, and its jobs with it (docs/jobs.md).
        sys.stderr.write(f"peon: job {result.value.get('job_id')} was stopped with this command's session; "
                         "background jobs live as long as a `peon mcp`, `peon serve` or embedded session\n")
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
    else:
        out, err = render_result(result.to_dict())
        sys.stdout.write(out)
        sys.stdout.flush()
        sys.stderr.write(err)
    if interrupted:
        return 130
    return 0 if result.ok else 1


def render_result(result: Mapping[str, Any]) -> tuple[str, str]:
    """(stdout, stderr) text of a call's result for a person: a process's output, a file's content or
    the value as JSON, then one status line; a failure is one line on stderr."""
    tool = result.get("tool", "")
    if not result.get("ok"):
        error = result.get("error") or {}
        return "", f"{tool} failed [{error.get('code')}]: {error.get('message')}\n"
    value = result.get("value")
    if not isinstance(value, Mapping):
        return json.dumps(value, indent=2, ensure_ascii=False) + "\n", ""
    if isinstance(value.get("output"), str) and "exit_code" in value:
        body, status = value["output"], process_status(value)
    elif isinstance(value.get("content"), str):
        body = value["content"]
        status = [human_bytes(int(value[k])) + " in total" for k in ("total_bytes",) if isinstance(value.get(k), int)]
        if value.get("truncated"):
            status.append("truncated")
    else:
        return json.dumps(value, indent=2, ensure_ascii=False) + "\n", ""
    if body and not body.endswith("\n"):
        body += "\n"
    return body + f"── {tool}: " + " · ".join(status) + "\n", ""


def process_status(value: Mapping[str, Any]) -> list[str]:
    status = []
    if value.get("timed_out"):
        status.append(f"timed out after {value.get('timeout_seconds', 0):g} s")
    elif value.get("cancelled"):
        status.append("cancelled")
    if value.get("limit_exceeded"):
        status.append(f"{value['limit_exceeded']} limit exceeded")
    if value.get("signal"):
        status.append(f"killed by {value['signal']}")
    elif value.get("exit_code") is not None:
        status.append(f"exit {value['exit_code']}")
    if isinstance(value.get("duration_ms"), int):
        status.append(f"{value['duration_ms'] / 1000:.1f} s")
    total = value.get("output_bytes")
    if value.get("truncated") and isinstance(total, int):
        kept = value.get("output_kept_bytes")
        kept_text = human_bytes(kept) if isinstance(kept, int) else "part"
        status.append(f"output truncated: {kept_text} of {human_bytes(total)} shown, the middle left out")
    elif isinstance(total, int):
        status.append(f"{human_bytes(total)} of output")
    if value.get("output_invalid_utf8"):
        status.append("some output was not UTF-8")
    return status


# -- peon tools / skills ---------------------------------------------------------------------------


def first_sentence(text: str) -> str:
    sentence = text.split(". ")[0].strip()
    return sentence if sentence.endswith(".") else sentence + "."


def cmd_tools(options: argparse.Namespace) -> int:
    with open_session(options) as session:
        tools = session.tools()
    if options.json:
        print(json.dumps(tools, indent=2, ensure_ascii=False))
        return 0
    width = max([len(t["name"]) for t in tools] + [4])
    print(f"{'NAME':<{width}}  {'RISK':<10}  DESCRIPTION")
    for tool in tools:
        print(f"{tool['name']:<{width}}  {tool['risk']:<10}  {first_sentence(tool['description'])}")
    return 0


def cmd_skills(options: argparse.Namespace) -> int:
    with open_session(options) as session:
        skills = session.info.get("skills") or {"available": [], "skipped": []}
    if options.json:
        print(json.dumps(skills, indent=2))
        return 0
    if not skills["available"]:
        print("No skills discovered.")
    for skill in skills["available"]:
        print(f"{skill['name']}  {skill['path']}\n    {skill['description']}")
    if skills["skipped"]:
        print("\nSkipped:")
        for entry in skills["skipped"]:
            print(f"  {entry['path']}: {entry['reason']}")
    return 0


# -- peon doctor -----------------------------------------------------------------------------------


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


def cmd_doctor(options: argparse.Namespace) -> int:
    from peon.core.errors import ConfigError, PeonError
    from peon.workers import cgroup

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
    agents: dict[str, Any] = {}
    session_layers = None
    session_sandbox: dict[str, Any] | None = None
    code = 0
    try:
        with open_session(options) as session:
            info = session.info
        session_sandbox = info.get("sandbox")
        facts["containment"] = info.get("containment")
        session_layers = info.get("config_layers")
        agents = agent_facts(Path(info.get("workspace") or options.workspace), info.get("config") or {}, os.environ)
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
    facts["sandbox"] = sandbox_facts(session_sandbox)
    facts["config"] = config_layers(options, session_layers)
    if options.json:
        print(json.dumps(facts, indent=2))
    else:
        print_doctor(facts)
    if code:
        print("peon: a session cannot start here; see above", file=sys.stderr)
    return code


def clean_leftover_cgroups(support: Any) -> dict[str, Any]:
    """``peon doctor --clean``: remove the empty cgroups of sessions whose supervisor is gone."""
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
                  + "".join(f"\n  ended      {name} (supervisor stopped, client gone)" for name in left["ended"])
                  + "".join(f"\n  kept       {name} ({why})" for name, why in left["kept"].items())
                  + "".join(f"\n  failed     {name}: {why}" for name, why in left["failed"].items()))
    sub = facts["subreaper"]
    print(f"subreaper    {'yes' if sub['supported'] else 'no'}: {sub['detail']}")
    o2 = facts["openat2"]
    shown = o2["available"] if isinstance(o2["available"], str) else ("yes" if o2["available"] else "no")
    print(f"openat2      {shown}: {o2['detail']}")
    tmp = facts["tempdir"]
    print(f"temp dir     {'yes' if tmp['writable'] else 'no'}: {tmp['detail']}")
    print_sandbox(facts["sandbox"])
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
    print("config layers")
    config = facts["config"]
    if config.get("error"):
        print(f"  error: {config['error']}")
    for layer in config["layers"]:
        keys = layer["keys"]
        summary = ", ".join(keys) if len(keys) <= 8 else ", ".join(keys[:8]) + f", … ({len(keys)} keys)"
        kind = f" ({layer['kind']})" if layer.get("kind") and layer["kind"] != layer["source"] else ""
        print(f"  {layer['source']}{kind}: {summary or '(no keys)'}")


def sandbox_facts(session: Mapping[str, Any] | None) -> dict[str, Any]:
    """The session's sandbox decision, and what this machine offers for each kind, with known fixes."""
    from peon.core.errors import PeonError
    from peon.workers import sandbox

    try:
        simulate = sandbox.Simulation.parse(os.environ.get(sandbox.SIMULATE_ENV, ""))
    except PeonError as exc:
        return {"session": session, "error": exc.message}
    from peon.workers import namespaces, syscall_filter

    layers = {"namespaces": "reported unavailable" if simulate.no_namespaces else namespaces.probe(),
              "seccomp": "reported unavailable" if simulate.no_seccomp else syscall_filter.available()}
    return {"session": session, "landlock": sandbox.probe_landlock(simulate).to_dict(),
            "bwrap": sandbox.probe_bwrap(os.environ, simulate).to_dict(),
            "namespaces": {"available": not layers["namespaces"],
                           "detail": layers["namespaces"] or "mount view and private network namespace per session",
                           "fixes": [] if not layers["namespaces"] else
                           ["run Peon as root (CAP_SYS_ADMIN), or use sandbox.kind = \"bwrap\""]},
            "seccomp": {"available": not layers["seccomp"], "detail": layers["seccomp"] or "libseccomp loaded",
                        "fixes": [] if not layers["seccomp"] else ["install libseccomp2"]}}


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
    for name in ("landlock", "bwrap", "namespaces", "seccomp"):
        probe = facts[name]
        print(f"{name:<12} {'yes' if probe['available'] else 'no'}: {probe['detail']}")
        for fix in probe["fixes"]:
            print(f"               fix: {fix}")


# -- entry point -----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    from peon import __version__

    parser = argparse.ArgumentParser(prog="peon", description="A tool runtime for AI coding agents.")
    parser.add_argument("--version", action="version", version=f"peon {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def common(sub: argparse.ArgumentParser, allow: bool = False) -> None:
        sub.add_argument("--workspace", "-w", default=".", metavar="DIR", help="the workspace directory (default: .)")
        sub.add_argument("--config", metavar="PATH", help="a TOML configuration file applied over the defaults")
        if allow:
            sub.add_argument("--allow", action="append", choices=RISK_NAMES, metavar="RISK",
                             help=f"allow calls of this risk without asking ({', '.join(RISK_NAMES)}); repeatable")

    mcp = commands.add_parser("mcp", help="serve the tools over MCP on stdin/stdout")
    common(mcp, allow=True)
    mcp.set_defaults(run=cmd_mcp)

    from peon.serve.options import add_arguments as add_serve_arguments  # argparse only, no HTTP stack

    serve = commands.add_parser("serve", help="serve the tools over MCP Streamable HTTP "
                                "(the serve extra: pip install 'peon-runtime[serve]')")
    common(serve, allow=True)
    add_serve_arguments(serve)
    serve.set_defaults(run=cmd_serve)

    call = commands.add_parser("call", help="run one tool call and print its result (JSON when piped)")
    call.add_argument("tool", help="the tool name (see `peon tools`)")
    call.add_argument("input", help="the tool input as a JSON object, or - to read it from stdin")
    call.add_argument("--json", action="store_true", help="print the result as JSON, also on a terminal")
    common(call, allow=True)
    call.set_defaults(run=cmd_call)

    tools = commands.add_parser("tools", help="list the tools, their risks and descriptions")
    tools.add_argument("--json", action="store_true", help="print every tool with its schemas as JSON")
    common(tools)
    tools.set_defaults(run=cmd_tools)

    skills = commands.add_parser("skills", help="list discovered skills and why others were skipped")
    skills.add_argument("--json", action="store_true", help="print the session's skill report as JSON")
    common(skills)
    skills.set_defaults(run=cmd_skills)

    doctor = commands.add_parser("doctor", help="show the facts about this machine that matter to Peon")
    doctor.add_argument("--json", action="store_true", help="print the facts as JSON")
    doctor.add_argument("--clean", action="store_true",
                        help="first remove the empty cgroups of Peon sessions whose supervisor is gone")
    common(doctor)
    doctor.set_defaults(run=cmd_doctor)
    return parser


def describe_os_error(exc: OSError) -> str:
    """One sentence for an operating-system error that stopped a command, with the fix when one is known."""
    text = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else "")
    if "temporary directory" in text:
        text += " (set TMPDIR to a writable directory)"
    return text


def main(argv: list[str] | None = None) -> None:
    options = build_parser().parse_args(argv)
    from peon.core.errors import ConfigError, ErrorCode, PeonError

    try:
        code = options.run(options)
    except UsageError as exc:
        print(f"peon: {exc}", file=sys.stderr)
        code = USAGE_ERROR
    except ConfigError as exc:
        print(f"peon: {exc.message}", file=sys.stderr)
        code = USAGE_ERROR
    except PeonError as exc:
        print(f"peon: {exc.message}", file=sys.stderr)
        code = USAGE_ERROR if exc.code == ErrorCode.NOT_FOUND else 1
    except KeyboardInterrupt:
        print("peon: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:
        # The reader of stdout went away: say nothing more there (not even at exit, when Python flushes).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    except OSError as exc:
        print(f"peon: {describe_os_error(exc)}", file=sys.stderr)
        code = 1
    sys.exit(code)


if __name__ == "__main__":
    main()
