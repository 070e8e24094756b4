"""What ``/metrics`` exposes, in the Prometheus text format, through ``prometheus_client``.

Promise: every figure is derived from what the session reports for each call (its result, its value's
process flags) and from what this server itself observes (queue, approvals, HTTP); labels come from
closed sets (tool names of this session, Peon's error codes, fixed reasons), so a client cannot grow the
number of series. Each server has its own registry. With OpenTelemetry on (:mod:`peon.otel`), the call,
approval, kill and restart series are also recorded through the OTel API, under the same names and labels.

Series:

* ``peon_calls_total{tool,outcome}`` — finished calls; ``outcome`` is ``ok`` or the error code;
* ``peon_call_duration_seconds{tool}`` — from submission to result (queue and approval included);
* ``peon_approval_wait_seconds`` and ``peon_approvals_total{decision}`` — asking the remote client;
* ``peon_queue_depth`` — calls submitted to the session and not answered yet;
* ``peon_process_kills_total{reason}`` — calls whose process tree Peon killed (``deadline``,
  ``cancel``, ``limit``);
* ``peon_limits_hit_total{limit}`` — ``deadline``, ``output`` (truncated), ``memory``/``pids``/… (the
  resource limit a call exceeded), ``input`` (too large), ``queue`` (busy), ``request_body`` (HTTP 413 or 408),
  ``request_head`` and ``pending_connections`` (stalled connections closed, :mod:`peon.serve.stalls`);
* ``peon_worker_failures_total{kind}`` — ``worker_crashed``, ``worker_oom``, ``worker_hung``,
  ``supervisor_died``; ``peon_supervisor_restarts_total``;
* ``peon_http_requests_total{endpoint,status}``, ``peon_mcp_sessions``, ``peon_idempotent_replays_total``;
* ``peon_ready`` — 1 when ``/readyz`` would answer 200, else 0 (set at each scrape: ``/metrics``
  answers from the moment the server listens, before the session is up);
* ``peon_containment_info{kind,limits}`` — how the session contains worker trees (``cgroup`` or
  ``process-tree``) and which limits the kernel enforces.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from peon.otel import kill_reason
from peon.client.result import ToolResult

CONTENT_TYPE = CONTENT_TYPE_LATEST
WORKER_FAILURES = ("worker_crashed", "worker_oom", "worker_hung", "supervisor_died")
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
_APPROVAL_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_ENDPOINTS = frozenset({"/mcp", "/healthz", "/readyz", "/metrics"})


class Metrics:
    def __init__(self, tools: list[str]):
        self.registry = CollectorRegistry(auto_describe=True)
        self.tools = frozenset(tools)
        r = self.registry
        self.calls = Counter("peon_calls", "Finished tool calls by tool and outcome (ok or the error code).",
                             ["tool", "outcome"], registry=r)
        self.duration = Histogram("peon_call_duration_seconds", "Time from submission to result.", ["tool"],
                                  buckets=_DURATION_BUCKETS, registry=r)
        self.approval_wait = Histogram("peon_approval_wait_seconds", "Time the remote client took to answer "
                                       "an approval request.", buckets=_APPROVAL_BUCKETS, registry=r)
        self.approvals = Counter("peon_approvals", "Approval requests sent to the remote client, by the "
                                 "decision that came back.", ["decision"], registry=r)
        self.queue_depth = Gauge("peon_queue_depth", "Calls submitted to the session and not answered yet.",
                                 registry=r)
        self.process_kills = Counter("peon_process_kills", "Calls whose process tree Peon killed, by reason.",
                                     ["reason"], registry=r)
        self.limits = Counter("peon_limits_hit", "Bounds that stopped or trimmed a call or request.", ["limit"],
                              registry=r)
        self.worker_failures = Counter("peon_worker_failures", "Calls lost to a worker or supervisor failure.",
                                       ["kind"], registry=r)
        self.restarts = Counter("peon_supervisor_restarts", "Supervisors started again after one died.",
                                registry=r)
        self.http = Counter("peon_http_requests", "HTTP requests by endpoint and status.", ["endpoint", "status"],
                            registry=r)
        self.sessions = Gauge("peon_mcp_sessions", "Open MCP sessions (2025-11-25 era).", registry=r)
        self.replays = Counter("peon_idempotent_replays", "Calls answered from the idempotency store instead "
                               "of running again.", registry=r)
        self.containment = Info("peon_containment", "How worker trees are contained.", registry=r)
        self.otel: dict[str, Any] = {}  # OpenTelemetry instruments (mirror_to), empty when off
        self.ready = Gauge("peon_ready", "1 when the server is ready to serve calls (as /readyz), else 0.",
                           registry=r)
        for kind in WORKER_FAILURES:  # present at zero, so a dashboard can tell "none" from "not exported"
            self.worker_failures.labels(kind)
        for reason in ("deadline", "cancel", "limit"):
            self.process_kills.labels(reason)

    def mirror_to(self, meter: Any) -> None:
        """Record the call, approval, kill and restart series through an OpenTelemetry meter as well."""
        self.otel = {
            "calls": meter.create_counter("peon_calls_total", description="Finished tool calls by tool and outcome."),
            "duration": meter.create_histogram("peon_call_duration_seconds", unit="s",
                                               description="Time from submission to result."),
            "approvals": meter.create_counter("peon_approvals_total", description="Approval requests by decision."),
            "kills": meter.create_counter("peon_process_kills_total", description="Calls whose tree Peon killed."),
            "restarts": meter.create_counter("peon_supervisor_restarts_total", description="Supervisors restarted."),
        }

    def approval(self, decision: str) -> None:
        decision = decision if decision in ("allow_once", "allow_session", "deny") else "other"
        self.approvals.labels(decision).inc()
        if self.otel:
            self.otel["approvals"].add(1, {"decision": decision})

    def restarted(self) -> None:
        self.restarts.inc()
        if self.otel:
            self.otel["restarts"].add(1)

    def set_tools(self, tools: list[str]) -> None:
        """The session's tool names, the closed set of the ``tool`` label (known once it started)."""
        self.tools = frozenset(tools)

    def describe_containment(self, containment: dict[str, Any]) -> None:
        self.containment.info({"kind": str(containment.get("kind", "unknown")),
                               "limits": str(containment.get("limits", ""))})

    def tool_label(self, tool: str) -> str:
        return tool if tool in self.tools else "(unknown)"

    def record_result(self, result: ToolResult, seconds: float) -> None:
        tool = self.tool_label(result.tool)
        outcome = "ok" if result.ok else (result.error.code if result.error else "tool_failed")
        self.calls.labels(tool, outcome).inc()
        self.duration.labels(tool).observe(seconds)
        if self.otel:
            self.otel["calls"].add(1, {"tool": tool, "outcome": outcome})
            self.otel["duration"].record(seconds, {"tool": tool})
            reason = kill_reason(result)
            if reason is not None:
                self.otel["kills"].add(1, {"reason": reason})
        if not result.ok and result.error is not None:
            code = result.error.code
            if code in WORKER_FAILURES:
                self.worker_failures.labels(code).inc()
            elif code in ("too_large",):
                self.limits.labels("input").inc()
            elif code == "busy":
                self.limits.labels("queue").inc()
            elif code == "timeout":
                self.limits.labels("deadline").inc()
            elif code == "limit_exceeded":
                self.limits.labels(_limit_name(result.error.details)).inc()
            return
        self._record_process(result.value or {})

    def _record_process(self, value: dict[str, Any]) -> None:
        if value.get("truncated") is True:
            self.limits.labels("output").inc()
        limit = value.get("limit_exceeded")
        if isinstance(limit, str) and limit:
            self.limits.labels(_limit_name({"limit": limit})).inc()
            self.process_kills.labels("limit").inc()
        elif value.get("timed_out") is True:
            self.limits.labels("deadline").inc()
            self.process_kills.labels("deadline").inc()
        elif value.get("cancelled") is True:
            self.process_kills.labels("cancel").inc()

    def record_http(self, path: str, status: int) -> None:
        self.http.labels(path if path in _ENDPOINTS else "(other)", str(status)).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


_LIMIT_NAMES = frozenset({"memory", "pids", "processes", "cpu", "output", "files", "disk"})


def _limit_name(details: Any) -> str:
    """A limit's name from a closed set (anything else is ``other``), so labels stay bounded."""
    if isinstance(details, dict):
        for key in ("limit", "resource", "name"):
            value = details.get(key)
            if isinstance(value, str):
                word = value.split(":")[0].split()[0].lower() if value.split() else ""
                if word in _LIMIT_NAMES:
                    return word
    return "other"
