"""Through ``peon mcp`` and the official MCP Python SDK, with MCP logging at debug and OpenTelemetry spans
exported to a receiver on loopback: a session whose environment holds a GitHub token (a fake in the real
format) runs commands that print it or carry another in their command line, and no log message, no span
attribute and no result carries either value; each result says what was redacted."""

from __future__ import annotations

import json

import anyio

from helpers import wait_for
from helpers.mcp import client, run
from helpers.otel import Receiver

TOKEN = "ghp_" + "Qw3Er4Ty5U" * 3 + "i6O7p8"
LITERAL = "glpat-" + "Zx8Cv7Bn6M" * 2  # another format, given on the command line itself


def test_no_log_message_span_or_result_carries_the_token(workspace, env):
    receiver = Receiver()
    logs: list[dict] = []

    async def on_log(params) -> None:
        logs.append({"level": params.level, "logger": params.logger, "data": params.data})

    async def scenario() -> list:
        session_env = {**env, "GITHUB_TOKEN": TOKEN, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                       "OTEL_BSP_SCHEDULE_DELAY": "100"}
        async with client(workspace, session_env, "--allow", "process", mode="legacy", logging_callback=on_log) as c:
            await c.set_logging_level("debug")
            printed = await c.call_tool("bash", {"command": "echo $GITHUB_TOKEN"})
            carried = await c.call_tool("bash", {"command": f"echo {LITERAL}; sleep 30", "timeout_seconds": 0.5})
            with anyio.fail_after(10):  # the kill is logged (warning): a message carrying the call's facts
                while not any(log["data"].get("event") == "killed" for log in logs):
                    await anyio.sleep(0.05)
            return [printed, carried]

    try:
        results = run(scenario())
        assert wait_for(lambda: len(receiver.named("tools/call bash")) == 2, 30), receiver.spans
    finally:
        receiver.close()
    printed, carried = results
    assert not printed.is_error, printed
    assert printed.structured_content["redacted"] == {"count": 1, "kinds": {"env:GITHUB_TOKEN": 1}}
    assert printed.structured_content["output"].startswith("«redacted:env:GITHUB_TOKEN:")
    assert carried.structured_content["timed_out"] is True
    assert carried.structured_content["redacted"]["kinds"] == {"gitlab_token": 1}
    assert "«redacted:gitlab_token:" in carried.structured_content["output"]
    shown = [json.dumps(result.model_dump(mode="json")) for result in results]
    everything = {"results": "".join(shown), "logs": json.dumps(logs), "spans": repr(receiver.spans)}
    for where, text in everything.items():
        assert TOKEN not in text and LITERAL not in text, where
    assert logs and receiver.spans
