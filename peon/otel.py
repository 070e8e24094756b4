"""OpenTelemetry for Peon's MCP servers: traces of tool calls and metrics beside Prometheus, optional.

Promises:

* nothing of OpenTelemetry is imported, and a call costs one attribute check, unless the ``otel`` extra
  is installed **and** an OTLP endpoint is configured the standard way (``OTEL_EXPORTER_OTLP_ENDPOINT``
  or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; ``OTEL_SDK_DISABLED=true`` turns it off); then the SDK's
  own environment variables configure it (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, headers,
  batching) and spans and metrics are exported over OTLP/HTTP;
* each ``tools/call`` (and each request served by a tool call) is one SERVER span named
  ``tools/call <tool>`` with the MCP and GenAI semantic-convention attributes (``mcp.method.name``,
  ``mcp.session.id``, ``gen_ai.operation.name`` = ``execute_tool``, ``gen_ai.tool.name``,
  ``gen_ai.tool.call.id``, ``error.type``); a client's ``traceparent``/``tracestate`` in
  ``params._meta`` makes it a child of the client's span;
* its children: ``peon.admission`` (from submission until the command starts: validation, risk,
  approval, queueing), ``peon.approval`` when the client is asked or the policy refuses
  (``peon.approval.decision``, ``peon.approval.decider``: ``client``, ``peon`` for a timeout, ``policy``),
  ``peon.run`` (the command's run, as long as the tool's ``duration_ms`` says; a tool that reports none
  gets one ``peon.run`` from submission with ``peon.run.includes_admission``) and ``peon.kill`` when
  Peon killed the call's processes (``peon.kill.reason``: ``deadline``, ``cancel``, ``limit``);
* a call carries its span's context to the session (:meth:`CallTrace.traceparent`), and ``bash``'s commands
  and the agent adapters' agents get it as ``TRACEPARENT``/``TRACESTATE``
  (:func:`peon.core.environment.command_environment`);
* a span's attributes are Peon's own facts and the client's names, with anything in a credential's
  format redacted (:func:`peon.core.redaction.redactor.formats_only`);
* metrics through the OTel API carry the Prometheus series' names and closed label sets.

A span never carries arguments, output or file content: only the tool, ids, codes and decisions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from peon.client.result import ToolResult

TRACER_NAME = "peon"
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def configured(environ: Mapping[str, str] | None = None) -> bool:
    """Whether telemetry is asked for: an OTLP endpoint is set and the SDK is not disabled."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return any(env.get(name) for name in ENDPOINT_VARIABLES)


def kill_reason(result: ToolResult) -> str | None:
    """Why Peon killed a call's processes (the Prometheus ``reason`` labels), or ``None``."""
    value = result.value or {}
    if value.get("limit_exceeded"):
        return "limit"
    if value.get("timed_out") is True:
        return "deadline"
    if value.get("cancelled") is True:
        return "cancel"
    return None


def _redacted(attributes: dict[str, Any]) -> dict[str, Any]:
    """Span attributes with any string in a credential's format redacted (they carry only Peon's own
    facts and the client's names: this is the net below that)."""
    from peon.core.redaction.redactor import formats_only

    redactor = formats_only()
    return {key: redactor.redact_text(value) if isinstance(value, str) else value for key, value in attributes.items()}


class CallTrace:
    """The spans of one call. Every method may be called from any thread, each at most once."""

    def __init__(self, telemetry: Telemetry, tool: str, method: str, meta: Any, session_id: str | None):
        from opentelemetry import propagate, trace

        self._trace = trace
        parent = None
        if isinstance(meta, Mapping):
            carrier = {key: value for key in ("traceparent", "tracestate")
                       if isinstance(value := meta.get(key), str) and len(value) <= 512}
            if carrier:
                parent = propagate.extract(carrier)
        attributes: dict[str, Any] = {"mcp.method.name": method, "gen_ai.operation.name": "execute_tool",
                                      "gen_ai.tool.name": tool}
        if session_id:
            attributes["mcp.session.id"] = session_id
        attributes = _redacted(attributes)
        self.span = telemetry.tracer.start_span(f"{method} {attributes['gen_ai.tool.name']}"
                                                if method == "tools/call" else method,
                                                context=parent, kind=trace.SpanKind.SERVER, attributes=attributes)
        self._context = trace.set_span_in_context(self.span)
        self._tracer = telemetry.tracer
        self._submitted = time.time_ns()
        self._asked = False

    def child(self, name: str, start: int, end: int | None = None, attributes: dict[str, Any] | None = None) -> None:
        span = self._tracer.start_span(name, context=self._context, start_time=start,
                                       attributes=_redacted(attributes or {}))
        span.end(end_time=end)

    def submitted(self, call_id: str) -> None:
        self.span.set_attribute("gen_ai.tool.call.id", _redacted({"id": call_id})["id"])

    def approval(self, asked_ns: int, decision: str, decider: str) -> None:
        self._asked = True
        self.child("peon.approval", asked_ns, None,
                   {"peon.approval.decision": decision, "peon.approval.decider": decider})

    def finished(self, result: ToolResult) -> None:
        now = time.time_ns()
        duration_ms = (result.value or {}).get("duration_ms")
        if result.error is not None:  # refused, queued out, cancelled before it ran, or lost with its worker
            self.child("peon.admission", self._submitted, now, {"error.type": result.error.code})
        elif isinstance(duration_ms, (int, float)) and not isinstance(duration_ms, bool):
            # A process tool says how long its command ran: admission is what came before.
            started = max(self._submitted, now - int(duration_ms * 1_000_000))
            self.child("peon.admission", self._submitted, started)
            self.child("peon.run", started, now)
        else:  # the session does not say when a worker took the call: one span for both
            self.child("peon.run", self._submitted, now, {"peon.run.includes_admission": True})
        reason = kill_reason(result)
        if reason is not None:
            self.child("peon.kill", now, now, {"peon.kill.reason": reason})
        if result.error is not None and result.error.code == "denied" and not self._asked:
            self.approval(now, "deny", "policy")  # refused by the configured policy, nobody asked
        if result.error is not None:
            self.span.set_attribute("error.type", result.error.code)
            self.span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, result.error.code))
        self.span.end(end_time=now)

    def traceparent(self) -> dict[str, str]:
        """The W3C headers of this call's span (for whatever it starts)."""
        from opentelemetry import propagate

        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=self._context)
        return carrier


class Telemetry:
    """The tracer and meter of one server process, set up once from the environment."""

    def __init__(self) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import OTELResourceDetector, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "peon"}).merge(
            OTELResourceDetector().detect())
        self.tracer_provider = TracerProvider(resource=resource)
        self.tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self.meter_provider = MeterProvider(resource=resource,
                                            metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())])
        trace.set_tracer_provider(self.tracer_provider)
        metrics.set_meter_provider(self.meter_provider)
        self.tracer = self.tracer_provider.get_tracer(TRACER_NAME)
        self.meter = self.meter_provider.get_meter(TRACER_NAME)

    def call(self, tool: str, method: str, meta: Any, session_id: str | None = None) -> CallTrace:
        return CallTrace(self, tool, method, meta, session_id)

    def shutdown(self) -> None:
        """Export what is pending (bounded by the SDK's own timeouts) and stop."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def from_environment() -> Telemetry | None:
    """The process's telemetry when configured and installed; ``None`` (nothing imported) otherwise."""
    if not configured():
        return None
    try:
        return Telemetry()
    except ImportError as exc:
        import sys

        print(f"peon: OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not installed ({exc.name}); "
              "install peon-runtime[otel] to export traces", file=sys.stderr)
        return None
