"""The interactive terminal approver, driven for real through a pseudo-terminal with pexpect: a real
session asks on /dev/tty, and each answer does what it says."""

from __future__ import annotations

import json
import re
import sys
import textwrap
from pathlib import Path

import pexpect
import pytest

ROOT = Path(__file__).resolve().parent.parent.parent

DRIVER = textwrap.dedent("""
    import json, sys
    import peon
    from peon.approvers import TerminalApprover

    workspace, state_dir, calls, limits = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
    approval = {"read_only": "allow", "filesystem": "ask", "process": "ask", "delegate": "ask"}
    config = {"approval": approval, "limits": limits}
    with peon.Session(workspace, config, state_dir=state_dir, approver=TerminalApprover()) as s:
        for i, (tool, args) in enumerate(calls):
            r = s.call(tool, args)
            if r.ok:
                print(f"RESULT {i} ok {r.value.get('output', '').strip()!r}", flush=True)
            else:
                print(f"RESULT {i} {r.error.code} by={r.error.details.get('by')}", flush=True)
    print("DONE", flush=True)
""")

PROMPT = r"Answer \[o/s(/p/a)?/t/r/D\]: "  # p and a: a command's prefix for the session, or saved


@pytest.fixture
def drive(tmp_path, workspace, leftovers):
    """drive(calls) -> a pexpect child running a session whose approver is the terminal."""
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    children = []

    def start(calls, limits=None):
        env = leftovers.env({"XDG_CONFIG_HOME": str(tmp_path / "no-user-config"), "PYTHONPATH": str(ROOT),
                             "COLUMNS": "200", "LINES": "50"})
        child = pexpect.spawn(sys.executable, [str(script), str(workspace), str(tmp_path / "state"), json.dumps(calls),
                                                  json.dumps(limits or {})],
                              env=env, cwd=str(ROOT), encoding="utf-8", timeout=30, dimensions=(50, 200))
        children.append(child)
        return child

    yield start
    for child in children:
        if child.isalive():
            child.terminate(force=True)
        child.close()


def bash(command: str) -> list:
    return ["bash", {"command": command}]


def test_the_prompt_shows_the_request(drive, workspace):
    child = drive([bash("echo shown")])
    child.expect("Peon asks for approval")
    child.expect(PROMPT)
    shown = child.before
    assert "tool:    bash" in shown
    assert re.search(r"risk:    process \(declared risk of bash(, inside the OS sandbox)?\)", shown)
    assert "action:  run in /bin/bash -lc: echo shown" in shown
    assert '    argv: ["/bin/bash", "-lc", "echo shown"]' in shown
    assert f"    cwd: {workspace.resolve()}" in shown
    assert 'input:   {"command":"echo shown"}' in shown
    for line in ("[o] allow once", "[s] allow this exact call for the rest of the session",
                 "[t] allow every bash call with process risk for the rest of the session",
                 "[r] allow every call with process risk for the rest of the session", "[d] deny (default)",
                 "[p] allow commands starting with `echo shown` for the rest of the session",
                 "[a] always allow commands starting with `echo shown` (saved to your configuration)"):
        assert line in shown
    child.sendline("d")
    child.expect(r"RESULT 0 denied by=approver")
    child.expect("DONE")


def test_allow_once_then_for_this_session_then_deny(drive, workspace):
    child = drive([bash("echo one"), bash("echo one"), bash("echo one"), bash("echo two"), bash("touch nope")])
    child.expect(PROMPT)
    child.sendline("o")  # allow once: the identical call is asked again
    child.expect(r"RESULT 0 ok 'one'")
    child.expect(PROMPT)
    assert "echo one" in child.before
    child.sendline("s")  # allow this exact call for the session
    child.expect(r"RESULT 1 ok 'one'")
    # The identical call now runs without a prompt; a different one is asked.
    index = child.expect([r"RESULT 2 ok 'one'", PROMPT])
    assert index == 0, "the granted call was asked again"
    child.expect(PROMPT)
    assert "echo two" in child.before
    child.sendline("yes")  # "yes" allows once
    child.expect(r"RESULT 3 ok 'two'")
    child.expect(PROMPT)
    child.sendline("")  # the default is deny
    child.expect(r"RESULT 4 denied by=approver")
    child.expect("DONE")
    assert not (workspace / "nope").exists()


def test_tool_scope_answer_covers_every_call_of_the_tool(drive):
    child = drive([bash("echo a"), bash("echo b"), bash("echo c")])
    child.expect(PROMPT)
    child.sendline("t")
    for i, word in enumerate("abc"):
        assert child.expect([rf"RESULT {i} ok '{word}'", PROMPT]) == 0
    child.expect("DONE")


def test_risk_scope_answer_covers_every_call_of_the_risk(drive, workspace):
    pytest.importorskip("peon.tools.write")
    calls = [bash("echo a"), bash("echo b"), ["write", {"path": "w.txt", "content": "x", "mode": "create"}]]
    child = drive(calls)
    child.expect(PROMPT)
    child.sendline("r")
    child.expect(r"RESULT 0 ok 'a'")
    child.expect(r"RESULT 1 ok 'b'")
    child.expect(PROMPT)  # filesystem risk is another risk: asked
    assert "tool:    write" in child.before and "risk:    filesystem" in child.before
    child.sendline("d")
    child.expect(r"RESULT 2 denied by=approver")
    child.expect("DONE")
    assert not (workspace / "w.txt").exists()


def test_nonsense_is_asked_again_and_control_characters_are_shown_escaped(drive):
    child = drive([bash("echo '\x1b[2Jcleared' \u202eevil")])
    child.expect(PROMPT)
    assert "\x1b" not in child.before and "\u202e" not in child.before
    assert r"echo '\x1b[2Jcleared' \u202eevil" in child.before
    child.sendline("maybe")
    child.expect(r"Please answer one of o, s, p, a, t, r, d\.")
    child.expect(PROMPT)
    child.sendline("n")
    child.expect(r"RESULT 0 denied by=approver")
    child.expect("DONE")


def test_end_of_input_denies(drive):
    child = drive([bash("echo x"), bash("echo y")])
    child.expect(PROMPT)
    child.sendeof()
    child.expect(r"end of input: denied")
    child.expect(r"RESULT 0 denied by=approver")
    child.expect(PROMPT)  # the next call is asked again and works
    child.sendline("o")
    child.expect(r"RESULT 1 ok 'y'")
    child.expect("DONE")


def test_an_unanswered_prompt_gives_up_with_the_supervisor(drive):
    child = drive([bash("echo x"), bash("echo y")], limits={"approval_timeout_seconds": 1.0})
    child.expect(PROMPT)
    # The prompt's notice and the call's result come from two threads, in either order; whichever
    # gives up first — the prompt or the supervisor's wait — the call is denied.
    notice, result = r"\(no answer within 1 s: denied\)", r"RESULT 0 denied by=(timeout|approver)"
    first = child.expect([notice, result], timeout=15)
    child.expect([result, notice][first])
    child.expect(PROMPT)  # the terminal is free for the next request
    child.sendline("o")
    child.expect(r"RESULT 1 ok 'y'")
    child.expect("DONE")
