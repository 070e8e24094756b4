"""When a worker serves again, without a process: the rule keeps it only after a clean outcome, and the
worker loop serves calls while it offers to (a warm-up round never offers)."""

from __future__ import annotations

import json
from pathlib import Path

from peon.core.errors import ErrorCode
from peon.workers.reuse import CLEAN_ERRORS, may_offer, serves_again

FIXTURES = Path(__file__).parent.parent / "fixtures"


# -- the rule (pure) ----------------------------------------------------------------------------------


def test_the_rule_keeps_a_worker_only_after_a_clean_outcome_and_commands_that_ended_clean():
    ok = {"op": "result", "id": "c", "ok": True, "value": {}}
    assert serves_again(ok)
    for code in CLEAN_ERRORS:
        assert serves_again({"op": "result", "id": "c", "ok": False, "error": {"code": code, "message": "m"}})
    for code in (ErrorCode.TIMEOUT, ErrorCode.CANCELLED, ErrorCode.TOOL_FAILED, ErrorCode.TOO_LARGE,
                 ErrorCode.WORKER_CRASHED, ErrorCode.WORKER_HUNG, ErrorCode.WORKER_OOM, "no_such_code"):
        error = {"code": getattr(code, "value", code), "message": "m"}
        assert not serves_again({"op": "result", "id": "c", "ok": False, "error": error}), code
    assert not serves_again({"op": "result", "id": "c", "ok": False, "error": "timeout"})
    assert not serves_again({"op": "progress", "id": "c"})
    clean = {"starts_processes": False, "commands_ended_clean": False, "left_children": False, "cancelled": False,
             "streams_live": False}
    assert may_offer(ok, **clean)
    assert may_offer(ok, **{**clean, "starts_processes": True, "commands_ended_clean": True})
    assert not may_offer(ok, **{**clean, "starts_processes": True})  # no command, or one that did not end clean
    for unclean in ("left_children", "cancelled", "streams_live"):
        assert not may_offer(ok, **{**clean, unclean: True}), unclean
    assert not may_offer({**ok, "ok": False, "error": {"code": "timeout", "message": "m"}}, **clean)


# -- the worker's loop, in this process (real sockets, no worker process) -----------------------------


def test_the_worker_loop_serves_calls_while_it_offers_to_and_a_warm_up_round_never_offers(tmp_path, monkeypatch):
    import asyncio
    import socket
    import sys

    from peon.client.config import load_config
    from peon.core.config_view import ResolvedConfig
    from peon.core.framing import encode_json
    from peon.core.tool import SessionView
    from peon.workers import worker
    from peon.workers.channel import FrameChannel

    sys.path.insert(0, str(FIXTURES))
    try:
        from peon_test_tools import EchoTool, ResidentTool
    finally:
        sys.path.remove(str(FIXTURES))
    loaded = load_config({}, env={"XDG_CONFIG_HOME": str(tmp_path / "none")})
    view = SessionView(workspace=tmp_path, config=ResolvedConfig(loaded.to_wire()).config, env={})
    tools = {"resident": ResidentTool(), "echo": EchoTool()}

    def call(call_id: str, tool: str, args: dict) -> bytes:
        return encode_json({"op": "call", "id": call_id, "tool": tool, "args": args, "deadline": 1e12,
                            "approved": {}, "progress": False, "stream": None})

    async def conversation(reusable: bool) -> list[dict]:
        ours, theirs = socket.socketpair()
        supervisor = FrameChannel(ours)
        serving = asyncio.create_task(worker._serve_one(theirs, call("c1", "resident", {}), view, tools, reusable))
        results = [json.loads(await supervisor.recv())]
        if results[0].get("reuse"):
            await supervisor.send(encode_json({"op": "cancel", "reason": "late"}))  # stale: skipped
            await supervisor.send(call("c2", "echo", {"text": "x"}))
            results.append(json.loads(await supervisor.recv()))
            await supervisor.send(call("c3", "resident", {}))  # after echo, which ran no command: not served
            assert await asyncio.wait_for(serving, 10) == 0
        supervisor.close()
        assert await asyncio.wait_for(serving, 10) == 0
        return results

    from setproctitle import getproctitle, setproctitle

    title = getproctitle()  # the loop titles the process it runs in, here the test's
    # The loop's process attributes are recorded at its first call, in this event loop: another test of this
    # process may have recorded them under another one (its SIGINT handler, say).
    monkeypatch.setattr("peon.workers.process_state._start", None)
    try:
        first, second = asyncio.run(conversation(True))
        [only] = asyncio.run(conversation(False))
    finally:
        setproctitle(title)
    assert first["id"] == "c1" and first["ok"] and first["reuse"] is True
    assert second["id"] == "c2" and second["ok"] and "reuse" not in second
    assert only["ok"] and "reuse" not in only

