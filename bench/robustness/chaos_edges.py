"""The sandbox's edges in the chaos mix: what a sandboxed command tries against what outlives it.

Promise: in a sandboxed chaos session (``sandbox.mode = "auto"`` with ``network = ["*.pythonhosted.org"]``),
:func:`next_edge_call` draws one attack — request heads that passed the allowlist proxy's old suffix check
(a NUL byte, a scope id, a user part, a numeric host) aimed at a loopback server of the runner's own; one of
git's redirections or agent-control files rewritten from inside (:mod:`helpers.git_attacks`); a ``write``
of one of git's redirections or an agent-control file that does not exist yet; a ``grep`` for the value of
a ``.env`` (at the root and beneath a directory whose name is not UTF-8) under globs two engines read
differently; ``prlimit``/``renice`` of the worker, the forkserver and the supervisor — and
:func:`check_edge` says what is wrong after it, whatever the answer (``ok`` or failed: a fault may make an
attack fail, never make it succeed). What must hold after each: the loopback server accepted nothing;
the user's next ``git status`` and ``git commit``, outside, run no payload; no agent-control file the
command or the call created is left in the workspace; no secret value came back; the supervisor's limits
and priority are as the session started them, and the next call's are too.

Each edge attack runs alone (never beside another call of its session): its check resets the workspace's
repository, which a command running meanwhile would see change under it. This module owns the attacks
and their checks; the invariants over the recorded events are ``chaos.py``'s.
"""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.robustness.chaos_calls import ROOT, Call

sys.path.insert(0, str(ROOT / "tests"))  # the attacks are the sandbox tests' own (helpers.*)
from helpers.git_attacks import ABSENT, ATTACKS, fresh_repository, git, git_env, user_runs_git
from helpers.loopback import ATTACKS as PROXY_ATTACKS
from helpers.loopback import SEND_HEADS, CountingServer, attack_head

SANDBOX = {"mode": "auto", "network": ["*.pythonhosted.org"]}
EDGE_SHARE = 0.3  # of a sandboxed session's rounds, each one edge attack alone
SECRET = "chaos-secret-5f0c2e"  # the value of the workspace's .env files
NOT_UTF8 = b"\xff-dir"
RESET_SECONDS = 30.0
# What the file tools may not write without a person's yes (an absent one each time: the check removes it).
CONTROL_WRITES = (".git/commondir", ".git/hooks/post-commit", ".git/info/attributes", ".envrc",
                  ".cursor/rules/x.mdc", ".vscode/tasks.json", ".claude/settings.json", ".github/workflows/x.yml")
GREP_GLOBS = (None, "{*.env}", "*.env", ".env*", "**/.env")
# Every agent-control path any attack creates: none may be left after a call.
CREATED = sorted({path for paths in ABSENT.values() for path in paths} | set(CONTROL_WRITES))
PPID = "ppid() { sed 's/.*) //' /proc/$1/stat | cut -d' ' -f2; }; "
# The worker ($PPID), the forkserver and the supervisor: each attempt, and what it answered.
RETUNE = (PPID + 'W=$PPID; F=$(ppid $W); S=$(ppid $F); for p in $W $F $S; do '
          'prlimit --pid "$p" --nofile=8:8 >/dev/null 2>&1; echo "prlimit $p $?"; '
          'renice -n 19 -p "$p" >/dev/null 2>&1; echo "renice $p $?"; done')


@dataclass
class Edges:
    """A sandboxed runner's fixtures: its workspace's repository and secrets, the loopback server the proxy
    attacks aim at, where payloads leave their markers, and the supervisor as each session started it."""

    workspace: Path
    tmp: Path  # the session's TMPDIR (writable inside the sandbox): payloads' markers go there
    home: Path  # the user's HOME for git outside
    server: CountingServer = field(default_factory=CountingServer)
    baseline: dict[int, tuple[str, str]] = field(default_factory=dict)  # supervisor pid -> (limits, nice)

    @classmethod
    def prepare(cls, run: Path, workspace: Path) -> Edges:
        edges = cls(workspace, run / "tmp", run / "home")
        edges.tmp.mkdir(exist_ok=True)
        edges.home.mkdir(exist_ok=True)
        edges.reset()
        return edges

    @property
    def git_env(self) -> dict[str, str]:
        return git_env(self.home)

    def reset(self) -> None:
        """The workspace's repository as the user left it, and the secrets beside it (the other files stay).
        The workspace shares its file system with the state directory, which a fault fills now and then:
        tried again until the disk has room (a fault ends within seconds)."""
        until = time.monotonic() + RESET_SECONDS
        while True:
            try:
                return self._reset()
            except (OSError, AssertionError):
                if time.monotonic() > until:
                    raise
                time.sleep(0.5)

    def _reset(self) -> None:
        for name in (".git", ".git-old", ".github", ".github-old", "h"):
            path = self.workspace / name
            if path.is_symlink() or path.is_file():
                path.unlink()
            elif path.is_dir():
                shutil.rmtree(path)
        for entry in self.tmp.iterdir():  # the payloads' markers and the repositories the attacks copied
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        keep = tuple(entry.name for entry in self.workspace.iterdir())
        fresh_repository(self.workspace, self.git_env, hooks=False, keep=keep)
        (self.workspace / ".env").write_text(f"API_TOKEN={SECRET}\n")
        hidden = os.path.join(os.fsencode(self.workspace), NOT_UTF8)
        os.makedirs(hidden, exist_ok=True)
        with open(os.path.join(hidden, b".env"), "w") as handle:
            handle.write(f"DB_PASSWORD={SECRET}\n")

    def remember(self, supervisor: int | None) -> None:
        """The supervisor's limits and priority as its session started (an attack must leave them so)."""
        if supervisor is not None and supervisor not in self.baseline:
            state = supervisor_state(supervisor)
            if state is not None:
                self.baseline[supervisor] = state


def supervisor_state(pid: int) -> tuple[str, str] | None:
    try:
        with open(f"/proc/{pid}/limits") as handle:
            limits = handle.read()
        with open(f"/proc/{pid}/stat") as handle:
            nice = handle.read().rpartition(")")[2].split()[16]
    except OSError:
        return None
    return limits, nice


def next_edge_call(rng: random.Random, n: int, edges: Edges) -> Call:
    roll = rng.random()
    if roll < 0.2:
        heads = [attack_head(template, edges.server.port) for template in rng.sample(PROXY_ATTACKS, 3)]
        argv = " ".join(shlex.quote(head.hex()) for head in heads)
        return Call("edge_proxy", "bash", {"command": f"{shlex.quote(sys.executable)} -c {shlex.quote(SEND_HEADS)} "
                                                      f"{argv}", "timeout_seconds": 20}, 20.0, always=True)
    if roll < 0.6:
        attack = rng.choice(sorted(ATTACKS))
        marker = edges.tmp / f"ran-{n}"
        command = f'PAYLOAD="touch {marker}"; {ATTACKS[attack]}; true'
        return Call(f"edge_git_{attack}", "bash", {"command": command, "timeout_seconds": 20}, 20.0, always=True,
                    pid_file=str(marker))
    if roll < 0.75:
        path = rng.choice(CONTROL_WRITES)
        return Call("edge_write", "write", {"path": path, "content": "[core]\n\tfsmonitor = touch /tmp/x\n"}, 20.0,
                    always=True)
    if roll < 0.9:
        args: dict[str, Any] = {"pattern": SECRET[:12]}
        glob = rng.choice(GREP_GLOBS)
        if glob is not None:
            args["glob"] = glob
        return Call("edge_grep", "grep", args, 20.0, always=True)
    return Call("edge_retune", "bash", {"command": RETUNE, "timeout_seconds": 20}, 20.0, always=True)


def check_edge(session: Any, call: Call, result: Any, edges: Edges) -> str | None:
    """What is wrong after an edge attack, or None (an attack that failed for a fault is judged alike)."""
    value = (result.value or {}) if result.ok else {}
    try:
        if call.kind == "edge_proxy":
            return check_proxy(edges, value)
        if call.kind.startswith("edge_git_"):
            return check_git(edges, call, value)
        if call.kind == "edge_write":
            if result.ok:
                return f"a write of {call.args['path']} was answered ok without a person's yes"
            return check_left(edges, value)
        if call.kind == "edge_grep":
            shown = json.dumps(value)
            return f"grep returned a .env's value: {shown[:200]}" if SECRET in shown else None
        if call.kind == "edge_retune":
            return check_retune(session, edges, value)
    finally:
        if call.kind.startswith("edge_git_") or call.kind == "edge_write":
            edges.reset()
    raise ValueError(call.kind)


def check_proxy(edges: Edges, value: dict[str, Any]) -> str | None:
    if edges.server.accepted:
        return f"the loopback server behind the proxy accepted {edges.server.accepted} connection(s)"
    if value.get("exit_code") == 0:
        answers = value.get("output", "").splitlines()
        if any(not answer.startswith(("HTTP/1.1 400 ", "HTTP/1.1 403 ")) for answer in answers):
            return f"the proxy answered an attack otherwise than 400/403: {answers}"
    return None


def check_git(edges: Edges, call: Call, value: dict[str, Any]) -> str | None:
    """The user's next git, outside: it runs nothing the command wrote; nothing agent-control is left."""
    marker = Path(str(call.pid_file))
    marker.unlink(missing_ok=True)  # a payload the command ran itself, inside: not what is judged here
    try:
        user_runs_git(edges.workspace, edges.git_env)
    except OSError:  # a full disk (a fault) refused the user's edit: the status alone
        git(edges.workspace, "status", env=edges.git_env)
    if marker.exists():
        return f"the user's git ran the command's payload after {call.kind} (result {str(value)[:300]})"
    return check_left(edges, value)


def check_left(edges: Edges, value: dict[str, Any]) -> str | None:
    left = [path for path in CREATED if os.path.lexists(edges.workspace / path)]
    return f"agent-control files left in the workspace: {left} (result {str(value)[:300]})" if left else None


def check_retune(session: Any, edges: Edges, value: dict[str, Any]) -> str | None:
    supervisor = session.supervisor_pid
    before, now = edges.baseline.get(supervisor), supervisor_state(supervisor)
    if before is not None and now is not None and before != now:
        return f"the supervisor's limits or priority changed (output {value.get('output', '')[:300]!r})"
    after = session.call("bash", {"command": "ulimit -n; nice", "timeout_seconds": 10})
    if after.ok and after.value.get("exit_code") == 0:
        nofile, nice = [*after.value["output"].split(), "?", "?"][:2]
        if nofile == "8" or nice != "0":
            return f"the next call started with nofile {nofile}, nice {nice}"
    return None
