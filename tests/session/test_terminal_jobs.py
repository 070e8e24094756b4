"""Programs that talk back, with real programs through sessions: bash's stdin, terminal jobs (python -i,
pdb, a [y/N] prompt, vim), job_write and its approval, job_output's screen, and nothing left at close."""

from __future__ import annotations

import json
import shutil

import pytest

from helpers import job_output_until, wait_for
from helpers.sandbox import bwrap_support


def start(session, command, **options):
    r = session.call("bash", {"command": command, "background": True, "tty": True, **options})
    assert r.ok, r.error
    return r.value["job_id"]


def write(session, job_id, text=None, keys=None, **options):
    args = {"job_id": job_id, **({"text": text} if text is not None else {}), **({"keys": keys} if keys else {}),
            **options}
    return session.call("job_write", args)


def screen_of(session, job_id):
    r = session.call("job_output", {"job_id": job_id, "screen": True})
    assert r.ok, r.error
    return r.value["screen"]


def test_stdin_is_fed_to_the_command_then_closed(open_session):
    session = open_session()
    r = session.call("bash", {"command": "wc -c", "stdin": "hello"})
    assert r.ok and r.value["output"].strip() == "5", r
    big = session.call("bash", {"command": "wc -c", "stdin": "x" * 65536})
    assert big.ok and big.value["output"].strip() == "65536", big


def test_a_stdin_over_its_bound_is_refused_before_anything_runs(open_session, workspace):
    session = open_session({"jobs": {"max_write_bytes": 4}})
    r = session.call("bash", {"command": "touch ran", "stdin": "hello"})
    assert not r.ok and r.error.code == "too_large" and r.error.details["limit"] == "jobs.max_write_bytes"
    assert not (workspace / "ran").exists()


def test_python_i_computes_what_is_typed(open_session, containment):
    session = open_session({"runtime": {"containment": containment}})  # a job host, or a worker of its own
    job = start(session, "exec python3 -i -q")
    assert ">>> " in job_output_until(session, job, ">>> ")
    r = write(session, job, "print(6*7)\n")
    assert r.ok, r.error
    assert "42" in r.value["output"] + job_output_until(session, job, "42")
    lines = screen_of(session, job)["lines"]
    assert "42" in lines and any(line.startswith(">>> print(6*7)") for line in lines)
    done = write(session, job, keys=["C-d"], wait_seconds=5)
    assert done.ok
    wait_for(lambda: session.call("job_output", {"job_id": job}).value["state"] != "running")
    assert session.call("job_output", {"job_id": job}).value["exit_code"] == 0
    ended = write(session, job, "x")
    assert not ended.ok and ended.error.code == "job_ended"


def test_pdb_steps_a_script_and_prints_a_variable(open_session, workspace):
    (workspace / "steps.py").write_text("x = 6\ny = x * 7\nprint('done', y)\n")
    session = open_session()
    job = start(session, "exec python3 -m pdb steps.py")
    assert "(Pdb)" in job_output_until(session, job, "(Pdb)")
    for command in ("next", "next"):
        assert write(session, job, command + "\n").ok
    r = write(session, job, "p y\n")
    assert r.ok
    assert "42" in r.value["output"] + job_output_until(session, job, "42")
    assert write(session, job, "quit\n").ok


def test_a_prompt_in_the_middle_of_a_script_gets_its_answer(open_session, workspace):
    (workspace / "ask.sh").write_text('read -r -p "Continue? [y/N] " answer\n'
                                      '[ "$answer" = y ] && echo "going on" > answered\n')
    session = open_session()
    job = start(session, "bash ask.sh")
    assert "[y/N]" in job_output_until(session, job, "[y/N]")
    r = write(session, job, "y", ["Enter"], wait_seconds=5)
    assert r.ok, r.error
    wait_for(lambda: (workspace / "answered").exists())
    assert (workspace / "answered").read_text() == "going on\n"


def test_a_stdin_pipe_job_reads_what_is_written_until_the_end_of_input(open_session):
    session = open_session()
    r = session.call("bash", {"command": "exec cat -n", "background": True, "stdin": "pipe"})
    assert r.ok, r.error
    job = r.value["job_id"]
    assert write(session, job, "first\nsecond\n").ok
    assert "second" in job_output_until(session, job, "second")
    assert write(session, job, eof=True).ok
    wait_for(lambda: session.call("job_output", {"job_id": job}).value["state"] != "running")
    page = session.call("job_output", {"job_id": job}).value
    assert page["exit_code"] == 0 and "1\tfirst" in page["output"]
    screen = session.call("job_output", {"job_id": job, "screen": True})
    assert not screen.ok and screen.error.code == "invalid_input"  # no terminal


@pytest.mark.skipif(shutil.which("vim") is None, reason="vim is not installed")
def test_vim_edits_a_file_and_its_screen_shows_before_it_writes(open_session, workspace):
    session = open_session()
    job = start(session, "exec vim -u NONE f.txt", rows=10, cols=40)
    wait_for(lambda: '"f.txt"' in "".join(screen_of(session, job)["lines"]), timeout=20)
    assert write(session, job, keys=["i", "hello", "Escape"]).ok
    wait_for(lambda: screen_of(session, job)["lines"][0] == "hello", timeout=20)
    shown = screen_of(session, job)
    assert shown["rows"] == 10 and shown["cols"] == 40 and shown["lines"][1].startswith("~")
    assert write(session, job, keys=[":wq", "Enter"]).ok
    wait_for(lambda: session.call("job_output", {"job_id": job}).value["state"] != "running", timeout=20)
    assert (workspace / "f.txt").read_text() == "hello\n"


def test_a_deny_rule_holds_for_a_line_typed_into_bash_i(open_session, workspace):
    (workspace / "target").mkdir()
    session = open_session({"approval": {"rules": [{"tool": "bash", "command_prefix": "rm -rf", "decision": "deny"}]}})
    job = start(session, "exec bash --norc -i")
    r = write(session, job, "rm -rf target\n")
    assert not r.ok and r.error.code == "denied", r
    assert (workspace / "target").is_dir()
    # Typed in pieces, the line is judged when Enter runs it.
    assert write(session, job, "rm -r").ok
    split = write(session, job, "f target", ["Enter"])
    assert not split.ok and split.error.code == "denied"
    assert write(session, job, keys=["C-u"]).ok  # the refused write typed nothing: clear what "rm -r" left
    # A key after which the line is not known makes its Enter refused.
    assert write(session, job, "rm -rf tar", ["Tab"]).ok
    unknown = write(session, job, keys=["Enter"])
    assert not unknown.ok and unknown.error.code == "input_not_analyzable"
    assert write(session, job, keys=["C-u"]).ok
    ok = write(session, job, "echo still here\n", wait_seconds=5)
    assert ok.ok, ok.error
    assert "still here" in ok.value["output"] + job_output_until(session, job, "still here")
    assert (workspace / "target").is_dir()


def test_a_terminal_that_edits_with_a_printable_key_takes_no_more_input(open_session, workspace):
    (workspace / "target").mkdir()
    session = open_session({"approval": {"rules": [{"tool": "bash", "command_prefix": "rm -rf", "decision": "deny"}]}})
    job = start(session, "exec bash --norc -i")
    assert write(session, job, "stty kill z; echo set=$?\n").ok
    assert "set=0" in job_output_until(session, job, "set=")
    # Judged as an echo; with "z" killing the line the shell would run rm -rf: it is never written.
    write(session, job, "echo zrm -rf target\n", wait_seconds=1)
    wait_for(lambda: not write(session, job, "").ok)
    refused = write(session, job, "echo more\n")
    assert not refused.ok and refused.error.code == "no_input"
    assert (workspace / "target").is_dir()


def test_an_ask_rule_asks_for_a_typed_line_and_the_approver_sees_it(open_session, workspace):
    asked = []

    def approver(request):
        asked.append(request)
        return "deny"

    session = open_session({"approval": {"rules": [{"tool": "bash", "command_prefix": "touch", "decision": "ask"}]}},
                           approver=approver)
    job = start(session, "exec bash --norc -i")
    r = write(session, job, "touch made\n")
    assert not r.ok and r.error.code == "denied"
    [request] = asked
    assert request["tool"] == "job_write" and request["details"]["typed_command"] == "touch made"
    assert [s["words"] for s in request["details"]["segments"]] == [["touch", "made"]]
    assert not (workspace / "made").exists()


def test_a_write_is_audited_before_it_is_written(open_session, tmp_path):
    state = tmp_path / "audited"
    session = open_session(state_dir=state)
    job = start(session, "exec cat")
    assert write(session, job, "abc\n").ok
    session.close()
    lines = [json.loads(line) for line in (state / "audit.jsonl").read_text().splitlines()]
    writes = [line for line in lines if line.get("tool") == "job_write"]
    assert [line.get("event") for line in writes][:2] == ["decision", "result"], writes
    assert writes[0]["input"]["text"] == "abc\n"


def test_writes_to_jobs_without_input_are_refused(open_session):
    session = open_session()
    plain = session.call("bash", {"command": "sleep 30", "background": True}).value["job_id"]
    r = write(session, plain, "x")
    assert not r.ok and r.error.code == "no_input"
    unknown = write(session, "job-999", "x")
    assert not unknown.ok and unknown.error.code == "unknown_job"
    too_big = session.call("bash", {"command": "exec cat", "background": True, "stdin": "pipe"}).value["job_id"]
    big = write(session, too_big, "x" * 70000)
    assert not big.ok and big.error.code == "too_large"


@pytest.mark.parametrize("invalid", [{"tty": True}, {"background": True, "rows": 10},
                                     {"background": True, "tty": True, "stdin": "x"}])
def test_terminal_options_where_they_do_not_apply_are_invalid(open_session, invalid):
    r = open_session().call("bash", {"command": "true", **invalid})
    assert not r.ok and r.error.code == "invalid_input"


def test_closing_the_session_leaves_no_process_of_a_terminal_job(open_session, leftovers, containment):
    session = open_session({"runtime": {"containment": containment}})
    job = start(session, "exec bash --norc -i")
    assert write(session, job, "sleep 300 &\n").ok
    assert write(session, job, "setsid sleep 301 &\n").ok
    session.close()  # the leftovers fixture fails the test if anything outlived it


@pytest.mark.parametrize("kind", ["landlock", "bwrap"])
def test_a_terminal_job_in_the_os_sandbox_writes_only_where_a_command_may(open_session, workspace, tmp_path, kind):
    if kind == "bwrap" and not bwrap_support().works:
        pytest.skip(f"bwrap unusable here: {bwrap_support().detail}")
    (tmp_path / "tmp").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    session = open_session({"sandbox": {"mode": "auto", "kind": kind}}, env={"TMPDIR": str(tmp_path / "tmp")})
    if not session.info["sandbox"]["active"] or session.info["sandbox"]["kind"] != kind:
        pytest.skip(f"the {kind} sandbox is not available here")
    job = start(session, "exec bash --norc -i")
    assert write(session, job, f"touch inside; touch {outside}/escaped; echo status=$?\n").ok
    text = job_output_until(session, job, "status=")
    assert "status=1" in text, text
    assert (workspace / "inside").exists() and not (outside / "escaped").exists()
    assert write(session, job, "tty; echo tty=$?\n").ok
    assert "tty=0" in job_output_until(session, job, "tty=")  # its own terminal, inside the sandbox
