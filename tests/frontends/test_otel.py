"""OpenTelemetry traces of ``peon serve`` on the wire: a real OTLP/HTTP receiver on loopback (in this
process) receives the spans of the test's client (``peon.RemoteSession``, the MCP SDK underneath) and of
the server, and the parent links are checked across them."""

from __future__ import annotations

import subprocess
import sys

import peon
from peon import otel
from helpers import wait_for
from helpers.otel import Receiver
from helpers.serve import ServeProcess, serve_env


def test_nothing_of_opentelemetry_loads_without_an_endpoint():
    code = ("import os, sys; os.environ.pop('OTEL_EXPORTER_OTLP_ENDPOINT', None); "
            "os.environ.pop('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', None); "
            "import peon.serve.main, peon.mcp.stdio, peon.otel as o; assert o.from_environment() is None; "
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert not otel.configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"})
    assert otel.configured({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x"})


def test_spans_link_client_server_and_worker(leftovers, workspace, tmp_path):
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    receiver = Receiver()
    provider = TracerProvider(resource=Resource.create({"service.name": "test-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces")))
    trace.set_tracer_provider(provider)
    env = serve_env(leftovers, tmp_path, {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                                          "OTEL_SERVICE_NAME": "peon-under-test", "OTEL_BSP_SCHEDULE_DELAY": "100",
                                          "OTEL_METRIC_EXPORT_INTERVAL": "500"})
    server = ServeProcess(workspace, env, tmp_path, "--allow", "process")
    try:
        with peon.RemoteSession(server.url) as session:
            ok = session.call("bash", {"command": "echo traced; echo \"$TRACEPARENT\""})
            assert ok.ok and ok.value["output"].startswith("traced\n00-"), ok
            slow = session.call("bash", {"command": "sleep 30", "timeout_seconds": 0.3})
            assert slow.value["timed_out"] is True
        assert wait_for(lambda: len(receiver.named("tools/call bash")) == 2, 30), receiver.spans
        wanted = {"peon_calls_total", "peon_call_duration_seconds", "peon_process_kills_total"}
        assert wait_for(lambda: wanted <= receiver.metric_names, 30), receiver.metric_names
    finally:
        assert server.stop() == 0
        provider.shutdown()
        receiver.close()
    by_id = {span["id"]: span for span in receiver.spans}
    calls = receiver.named("tools/call bash")
    for call in calls:
        assert call["service"] == "peon-under-test"
        assert call["attributes"]["mcp.method.name"] == "tools/call"
        assert call["attributes"]["gen_ai.tool.name"] == "bash"
        assert call["attributes"]["gen_ai.operation.name"] == "execute_tool"
        assert call["attributes"]["gen_ai.tool.call.id"]
        client = by_id.get(call["parent"])
        assert client is not None and client["service"] == "test-agent", (call, receiver.spans)
        assert client["trace"] == call["trace"]
        children = {span["name"] for span in receiver.spans if span["parent"] == call["id"]}
        assert children - {"peon.kill"} == {"peon.admission", "peon.run"}, children
    # The command got the call span's context: a tool that speaks OpenTelemetry continues the trace.
    _, command_trace, command_parent, _ = ok.value["output"].split("\n")[1].split("-")
    traced = next(call for call in calls if call["id"] == command_parent)
    assert traced["trace"] == command_trace
    kills = receiver.named("peon.kill")
    assert len(kills) == 1 and kills[0]["attributes"]["peon.kill.reason"] == "deadline"
    assert by_id[kills[0]["parent"]]["name"] == "tools/call bash"
    assert "echo traced" not in repr(receiver.spans)
    from peon.core.environment import trace_context

    assert trace_context({"traceparent": "00-x-y-01"}) == {}
    assert trace_context({"traceparent": ok.value["output"].split("\n")[1], "tracestate": "a=\n"}) == {
        "traceparent": ok.value["output"].split("\n")[1]}  # no arguments or output in spans


def test_peon_mcp_continues_the_clients_trace(leftovers, workspace, tmp_path):
    from helpers.mcp import RawServer, isolated_env

    receiver = Receiver()
    env = {**isolated_env(leftovers, tmp_path / "home"), "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
           "OTEL_BSP_SCHEDULE_DELAY": "100"}
    server = RawServer(workspace, env, tmp_path, "--allow", "process")
    trace_id, parent_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    try:
        server.initialize()
        server.request(1, "tools/call", {"name": "bash", "arguments": {"command": "true"},
                                         "_meta": {"traceparent": f"00-{trace_id}-{parent_id}-01"}})
        assert server.recv()["result"]["isError"] is False
        server.request(2, "resources/templates/list")  # answered without a call: no span
        assert "result" in server.recv()
    finally:
        assert server.close() == 0
    try:
        assert wait_for(lambda: receiver.named("tools/call bash"), 30), receiver.spans
    finally:
        receiver.close()
    call = receiver.named("tools/call bash")[0]
    assert (call["trace"], call["parent"]) == (trace_id, parent_id)
    assert call["service"] == "peon"
    assert {span["name"] for span in receiver.spans if span["parent"] == call["id"]} == {"peon.admission", "peon.run"}


def test_agent_adapters_pass_the_call_span_to_the_agent(leftovers, workspace, tmp_path):
    """An agent started by an adapter gets the call span's context as TRACEPARENT/TRACESTATE, as bash's
    commands do: the stand-in ``claude`` prints what it got, and its parent is the call's span."""
    from helpers.mcp import RawServer, isolated_env

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    agent = bin_dir / "claude"
    agent.write_text('#!/bin/sh\nprintf "%s|%s\\n" "$TRACEPARENT" "$TRACESTATE"\n')
    agent.chmod(0o755)
    receiver = Receiver()
    env = {**isolated_env(leftovers, tmp_path / "home"), "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
           "OTEL_BSP_SCHEDULE_DELAY": "100", "PATH": f"{bin_dir}:/usr/bin:/bin"}
    server = RawServer(workspace, env, tmp_path, "--allow", "delegate")
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    try:
        server.initialize()
        server.request(1, "tools/call", {"name": "agent_claude", "arguments": {"prompt": "say hi"},
                                         "_meta": {"traceparent": f"00-{trace_id}-{parent_id}-01",
                                                   "tracestate": "vendor=opaque"}})
        answer = server.recv()["result"]
        assert answer["isError"] is False, answer
    finally:
        assert server.close() == 0
    try:
        assert wait_for(lambda: receiver.named("tools/call agent_claude"), 30), receiver.spans
    finally:
        receiver.close()
    call = receiver.named("tools/call agent_claude")[0]
    assert (call["trace"], call["parent"]) == (trace_id, parent_id)
    seen_parent, seen_state = answer["structuredContent"]["output"].strip().split("|")
    assert seen_parent == f"00-{trace_id}-{call['id']}-01"
    assert seen_state == "vendor=opaque"
