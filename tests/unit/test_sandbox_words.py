"""The OS sandbox in words: the server's instructions and the approver's line say what the session's
sandbox status says — its layers, writable paths, reads and network — never a fixed claim."""

from __future__ import annotations

from peon.core.sandbox_words import call_sandbox_line, session_sandbox_sentence
from peon.mcp.instructions import server_instructions

PLAN = {"kind": "landlock", "abi": 7, "writable": ["/work", "/tmp", "/dev/null", "/dev/tty"], "readable": ["/"],
        "network": True, "mount_view": True, "seccomp": True, "netns": "", "protected": [".git/hooks", ".peon"]}
ACTIVE = {"active": True, "kind": "landlock", "plan": PLAN, "layers": ["landlock", "mount_view", "seccomp"],
          "not_enforced": []}


def test_an_active_sandbox_is_described_from_its_plan():
    said = server_instructions("/work", ACTIVE)
    assert said.startswith("Peon runs these tools in the workspace /work.")
    assert "not sandboxed" not in said
    assert "bash commands run in the OS sandbox (landlock ABI 7 + mount view + seccomp)" in said
    assert "write only beneath /work, /tmp (other writes fail" in said and "/dev/null" not in said
    assert "read everything" in said and "network access is on" in said
    assert ".git/hooks, .peon stay read-only" in said


def test_an_inactive_sandbox_says_so_with_its_reason():
    said = session_sandbox_sentence({"active": False, "reason": 'sandbox.mode is "off"'})
    assert said == 'bash commands are not sandboxed (sandbox.mode is "off"): they run with the user\'s own permissions.'


def test_unknown_status_points_at_each_result():
    said = server_instructions("/work", None)
    assert "each bash result's `sandbox`" in said and "Process tools are not sandboxed" not in said


def test_gaps_and_narrow_reads_are_named():
    plan = {**PLAN, "readable": ["/usr", "/etc"], "network": False, "netns": "peon-1"}
    said = session_sandbox_sentence({**ACTIVE, "plan": plan, "not_enforced": ["signals to other processes"]})
    assert "read only /usr, /etc" in said and "through the session's proxy only" in said
    assert said.endswith("Not enforced: signals to other processes.")


def test_the_approvers_line_is_one_line():
    line = call_sandbox_line({**PLAN, "active": True, "writable": [f"/w{i}" for i in range(9)],
                              "not_enforced": ["a", "b"]})
    assert "\n" not in line
    assert line == ("landlock ABI 7 + mount view + seccomp; writes only /w0, /w1, /w2, /w3, /w4, /w5 and 3 more; "
                    "reads everything; network on; 2 things not enforced (details)")
    assert call_sandbox_line(None) == "not sandboxed"
    assert call_sandbox_line({"active": False, "reason": "no landlock"}) == "not sandboxed (no landlock)"
