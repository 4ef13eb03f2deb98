"""An OTLP/HTTP trace receiver on loopback, for the OpenTelemetry trace mode's tests and load
test: it takes `POST /v1/traces` with a protobuf `ExportTraceServiceRequest` (decoded with the
official definitions of the `opentelemetry-proto` package), keeps every span with its resource
and scope, and answers an empty `ExportTraceServiceResponse`, as a collector does. It is not a
collector: nothing is forwarded or stored beyond this process."""
import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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


class Receiver:
    """`with Receiver() as r:` serves on `r.url` until the block ends; `r.spans` holds
    (resource attributes, scope name, span) for every span received."""

    def __init__(self, path="/v1/traces", keep=True):
        self.path = path
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
                elif self.headers.get("Content-Type") != "application/x-protobuf":
                    problem = f"Content-Type {self.headers.get('Content-Type')!r}"
                if problem is None:
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    receiver._add(request)
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
