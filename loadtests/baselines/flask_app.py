"""Flask baseline: the mlp ONNX model through onnxruntime behind KServe v2 JSON.

  BASELINE_INTRA_THREADS=1 loadtests/.baselines-venv/bin/gunicorn -w 2 -k gthread --threads 2 \
      --chdir loadtests/baselines -b 127.0.0.1:PORT flask_app:app
  loadtests/.baselines-venv/bin/python loadtests/baselines/flask_app.py --help

Routes: GET /v2 (server metadata), /v2/health/ready, /v2/health/live, /v2/models/<m>, /v2/models/<m>/ready,
/v2/models/<m>/config, /v2/models[/<m>]/stats (zeros), POST /v2/models/<m>/infer (JSON tensors only).
See v2model.py for the environment variables.
"""
import json
import sys

from flask import Flask, Response, request

import v2model

app = Flask(__name__)


def _json(obj, status=200):
    return Response(json.dumps(obj), status=status, mimetype="application/json")


def _known(m):
    return m == v2model.NAME


@app.get("/v2")
def server_metadata():
    return _json(v2model.SERVER)


@app.get("/v2/health/ready")
@app.get("/v2/health/live")
def health():
    return Response(status=200)


@app.get("/v2/models/<m>")
@app.get("/v2/models/<m>/versions/<v>")
def metadata(m, v=None):
    return _json(v2model.METADATA) if _known(m) else _json({"error": f"unknown model '{m}'"}, 404)


@app.get("/v2/models/<m>/ready")
def model_ready(m):
    return Response(status=200 if _known(m) else 404)


@app.get("/v2/models/<m>/config")
@app.get("/v2/models/<m>/versions/<v>/config")
def config(m, v=None):
    return _json(v2model.CONFIG) if _known(m) else _json({"error": f"unknown model '{m}'"}, 404)


@app.get("/v2/models/stats")
def all_stats():
    return _json(v2model.stats())


@app.get("/v2/models/<m>/stats")
@app.get("/v2/models/<m>/versions/<v>/stats")
def stats(m, v=None):
    return _json(v2model.stats()) if _known(m) else _json({"error": f"unknown model '{m}'"}, 404)


@app.post("/v2/models/<m>/infer")
@app.post("/v2/models/<m>/versions/<v>/infer")
def infer(m, v=None):
    if not _known(m):
        return _json({"error": f"unknown model '{m}'"}, 404)
    body = request.get_data()
    try:
        return _json(v2model.infer(v2model.json_part(body, request.headers.get("Inference-Header-Content-Length"))))
    except (v2model.BadRequest, ValueError, KeyError) as e:
        return _json({"error": str(e)}, 400)


if __name__ == "__main__":
    if "--help" in sys.argv or "-h" in sys.argv:
        print(__doc__)
        sys.exit(0)
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
    app.run("127.0.0.1", port)  # development server; the benchmark uses gunicorn
