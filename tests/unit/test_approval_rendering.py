"""How an approval request is shown and answered, without a terminal or a session: the terminal approver on
given streams (the answers it offers, nonsense repeated is a denial, long fields bounded, escapes made
visible), and the same facts in the terminal prompt and in an MCP client's elicitation form."""

from __future__ import annotations

import io

from peon.approvers import TerminalApprover, render_request, visible


# -- without a terminal ----------------------------------------------------------------------------


def test_given_streams_are_used_instead_of_the_terminal():
    out = io.StringIO()
    approver = TerminalApprover(io.StringIO("x\ns\n"), out)
    answer = approver({"tool": "bash", "risk": "process", "summary": "run", "canonical_input": "{}",
                       "scopes": ["call", "tool", "risk"]})
    assert answer == {"decision": "allow_session", "scope": "call", "reason": "allowed at the terminal"}
    assert "Please answer one of" in out.getvalue()


def test_repeated_nonsense_is_a_denial():
    approver = TerminalApprover(io.StringIO("x\n" * 10), io.StringIO())
    assert approver({"tool": "t", "risk": "process", "scopes": ["call"]})["decision"] == "deny"


def test_only_offered_scopes_are_shown():
    text, answers = render_request({"tool": "t", "risk": "process", "scopes": ["call"]})
    assert set(answers) == {"o", "s", "d"} and "[t]" not in text


def test_long_fields_are_bounded_and_say_so():
    text, _ = render_request({"tool": "write", "risk": "filesystem", "summary": "s", "canonical_input": "x" * 10_000})
    assert "[6000 more characters not shown]" in text


def test_visible_escapes_what_could_repaint_or_reorder_the_prompt():
    assert visible("a\x1b[1Ab\rc\u202ed\u2028e\x7f") == r"a\x1b[1Ab\x0dc\u202ed\u2028e\x7f"


def test_without_session_answers_only_once_or_deny_is_offered():
    request = {"tool": "bash", "risk": "process", "scopes": ["call", "tool", "risk"], "canonical_input": "{}"}
    text, answers = render_request(request, offer_session=False)
    assert set(answers) == {"o", "d"} and "[s]" not in text and "[r]" not in text
    assert "this session ends with this call" in text
    out = io.StringIO()
    answer = TerminalApprover(io.StringIO("s\nr\no\n"), out, offer_session=False)(request)
    assert answer == {"decision": "allow_once", "reason": "allowed at the terminal"}
    assert out.getvalue().count("Please answer one of o, d.") == 2


# -- one list of facts for every front end ---------------------------------------------------------------


def test_the_terminal_and_an_mcp_client_show_the_same_facts():
    """The CLI prompt and the MCP elicitation form render one list of facts: segments and the sandbox
    included, so neither front end hides what the other shows."""
    from peon.approvers import render_request, request_facts
    from peon.mcp.elicitation import approval_elicitation
    from peon.approval.policy import ApprovalRequest
    from peon.core.tool import ToolRisk

    request = ApprovalRequest("c1", "bash", ToolRisk.PROCESS, "runs a command", "run: git status | head",
                              canonical_input='{"command":"git status | head"}', sandboxed=True,
                              details={"segments": [{"words": ["git", "status"]}, {"words": ["head"]}]}).to_dict()
    facts = request_facts(request)
    terminal = render_request(request)[0]
    form = approval_elicitation(request, "2025-11-25")["message"]
    assert any("sandbox" in line for line in facts) and any("1. git status" in line for line in facts)
    assert any("2. head" in line for line in facts) and any("input:" in line for line in facts)
    for line in facts:
        assert line in terminal.splitlines() and line in form.splitlines(), line


# -- what the prompt says first ---------------------------------------------------------------------------


SANDBOX = {"active": True, "kind": "landlock", "abi": 7, "writable": ["/work", "/tmp", "/dev/null"], "readable": ["/"],
           "network": True, "mount_view": True, "seccomp": True, "netns": "", "not_enforced": [],
           "protected": [".git/hooks"], "hidden": ["/state"]}


def test_the_prompt_shows_the_command_what_it_touches_and_the_sandbox_in_one_line():
    request = {"tool": "bash", "risk": "process", "risk_reason": "declared risk of bash", "sandboxed": True,
               "summary": "run in /bin/bash -lc: ls ~/ > out.txt 2>&1", "scopes": ["call"],
               "canonical_input": '{"command":"ls ~/ > out.txt 2>&1"}',
               "details": {"argv": ["/bin/bash", "-lc", "ls ~/ > out.txt 2>&1"], "cwd": "/work",
                           "segments": [{"words": ["ls", "~/"], "redirects": [">out.txt", ">&1"]}],
                           "sandbox": SANDBOX}}
    text = render_request(request)[0]
    assert "  command: ls ~/ > out.txt 2>&1" in text.splitlines()
    assert "  touches: runs in /work; writes out.txt" in text.splitlines()
    (sandbox,) = [line for line in text.splitlines() if line.startswith("  sandbox:")]
    assert sandbox == ("  sandbox: the call runs inside the OS sandbox: landlock ABI 7 + mount view + seccomp; "
                       "writes only /work, /tmp; reads everything; network on")
    assert '"writable"' not in text and "{" not in text.replace('{"command"', "")  # no raw JSON of the plan
    assert "1. ls ~/" in text


def test_a_file_call_shows_the_directories_it_makes():
    request = {"tool": "write", "risk": "filesystem", "summary": "create 'pkg/sub/a.py'", "scopes": ["call"],
               "details": {"path": "pkg/sub/a.py", "create_directories": ["pkg", "pkg/sub"], "expected_sha256": None}}
    text = render_request(request)[0]
    assert "  touches: pkg/sub/a.py; makes pkg, pkg/sub" in text.splitlines()
    assert "command:" not in text and "sandbox:" not in text and "expected_sha256" not in text


def test_words_bash_computes_are_shown_as_written():
    from peon.approval.shell import analyze

    segments = analyze('ls ~/ "$HOME"/x; env A=1 cat $(pwd)/f').to_dict()["segments"]
    shown = [segment["words"] for segment in segments]
    assert ["ls", "~/", '"$HOME"/x'] in shown and ["cat", "$(pwd)/f"] in shown and ["pwd"] in shown
    assert all("?" not in words for words in shown)


def test_a_connection_question_offers_answers_about_that_host_and_port_only():
    text, answers = render_request({"tool": "network", "risk": "process", "scopes": ["call", "tool", "risk"],
                                    "summary": "connect to api.example.test:443",
                                    "details": {"host": "api.example.test", "port": 443, "network_ask": True}})
    assert set(answers) == {"o", "s", "d"} and answers["s"] == {"decision": "allow_session", "scope": "call"}
    assert "allow connections to api.example.test:443 for the rest of the session" in text
    assert "risk" not in text.split("[o]")[1]  # no "every call with process risk"
    _, once = render_request({"tool": "network", "details": {"host": "h", "port": 1}}, offer_session=False)
    assert set(once) == {"o", "d"}
