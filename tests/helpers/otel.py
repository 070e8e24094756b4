"""An OTLP/HTTP receiver on loopback, in the test's process: every span exported to it, decoded."""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Receiver:
    """An OTLP/HTTP receiver: every span exported to ``/v1/traces``, decoded from protobuf."""

    def __init__(self) -> None:
        otlp = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2",
                                   reason="the otel extra is not installed")
        metrics_otlp = pytest.importorskip("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")
        self.spans: list[dict] = []
        self.metric_names: set[str] = set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    request = otlp.ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    receiver.add(request)
                elif self.path == "/v1/metrics":
                    request = metrics_otlp.ExportMetricsServiceRequest()
                    request.ParseFromString(body)
                    receiver.metric_names |= {metric.name for resource in request.resource_metrics
                                              for scope in resource.scope_metrics for metric in scope.metrics}
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def add(self, request) -> None:
        for resource_spans in request.resource_spans:
            service = next((a.value.string_value for a in resource_spans.resource.attributes
                            if a.key == "service.name"), "")
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.spans.append({
                        "service": service, "name": span.name, "trace": span.trace_id.hex(),
                        "id": span.span_id.hex(), "parent": span.parent_span_id.hex(),
                        "attributes": {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes},
                    })

    def named(self, name: str) -> list[dict]:
        return [span for span in self.spans if span["name"] == name]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
