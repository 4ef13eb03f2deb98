"""An OTLP/HTTP trace receiver on loopback, for the OpenTelemetry trace mode's tests and load
test: it takes `POST /v1/traces` with a protobuf `ExportTraceServiceRequest` (decoded with the
official definitions of the `opentelemetry-proto` package), keeps every span with its resource
and scope, and answers an empty `ExportTraceServiceResponse`, as a collector does. With
`json=True` it also takes OTLP/JSON (what Triton 2.51's exporter sends). It is not a collector:
nothing is forwarded or stored beyond this process."""
import base64
import gzip
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from helpers import wait_until


def attributes(kvs) -> dict:
    """OTLP KeyValues as a plain dict (string, int, double and bool values)."""
    out = {}
    for kv in kvs:
        v = kv.value
        kind = v.WhichOneof("value")
        out[kv.key] = getattr(v, kind) if kind else None
    return out


ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids_to_base64(node):
    """OTLP/JSON writes trace and span ids as hex, where protobuf's JSON mapping expects base64."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ID_FIELDS and isinstance(value, str):
                node[key] = base64.b64encode(bytes.fromhex(value)).decode()
            else:
                _hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids_to_base64(item)
    return node


def parse_export(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    if content_type == "application/json":
        json_format.ParseDict(_hex_ids_to_base64(json.loads(body)), request, ignore_unknown_fields=True)
    else:
        request.ParseFromString(body)
    return request


class Receiver:
    """`with Receiver() as r:` serves on `r.url` until the block ends; `r.spans` holds
    (resource attributes, scope name, span) for every span received."""

    def __init__(self, path="/v1/traces", keep=True, json=False):
        self.path = path
        self.types = ("application/x-protobuf", "application/json") if json else ("application/x-protobuf",)
        self.keep = keep
        self.spans = []
        self.requests = 0
        self.bad = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                problem = None
                if self.path != receiver.path:
                    problem = f"POST to {self.path}, expected {receiver.path}"
                elif self.headers.get("Content-Type") not in receiver.types:
                    problem = f"Content-Type {self.headers.get('Content-Type')!r}"
                if problem is None:
                    receiver._add(parse_export(body, self.headers["Content-Type"]))
                    reply = ExportTraceServiceResponse().SerializeToString()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/x-protobuf")
                else:
                    with receiver.lock:
                        receiver.bad.append(problem)
                    reply = problem.encode()
                    self.send_response(400)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def _add(self, request):
        with self.lock:
            self.requests += 1
            for rs in request.resource_spans:
                resource = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        if self.keep:
                            self.spans.append((resource, ss.scope.name, span))
                        else:
                            self.spans.append(None)

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def all(self):
        with self.lock:
            return list(self.spans)

    def count(self, name=None) -> int:
        return sum(1 for s in self.all() if s is not None and (name is None or s[2].name == name))

    def traces(self, expected: int, timeout=30.0) -> dict:
        """{trace id (hex): [span, ...]} once `expected` root spans (`InferRequest`) have come,
        each with all the spans of its trace (the root ends last, so it comes with or after them)."""
        wait_until(lambda: self.count("InferRequest") >= expected, timeout=timeout,
                   what=f"{expected} InferRequest spans at the receiver (have {self.count('InferRequest')})")
        out = {}
        for _, _, span in self.all():
            out.setdefault(span.trace_id.hex(), []).append(span)
        return out
