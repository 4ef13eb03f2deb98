"""FastAPI baseline: the mlp ONNX model through onnxruntime behind KServe v2 JSON.

  BASELINE_INTRA_THREADS=1 loadtests/.baselines-venv/bin/uvicorn --workers 2 --loop uvloop \
      --http httptools --app-dir loadtests/baselines --host 127.0.0.1 --port PORT fastapi_app:app
  loadtests/.baselines-venv/bin/python loadtests/baselines/fastapi_app.py --help

The same routes as flask_app.py. The infer handler is `async def` and runs ONNX Runtime inline
(one request computing per worker process at a time, no thread pool hop); requests are parsed
with json.loads, not pydantic models, which is the faster way to write it.
"""
import json
import sys

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

import v2model

app = FastAPI()


def _json(obj, status=200):
    return Response(json.dumps(obj), status_code=status, media_type="application/json")


def _unknown(m):
    return JSONResponse({"error": f"unknown model '{m}'"}, status_code=404)


@app.get("/v2")
async def server_metadata():
    return _json(v2model.SERVER)


@app.get("/v2/health/ready")
@app.get("/v2/health/live")
async def health():
    return Response(status_code=200)


@app.get("/v2/models/stats")
async def all_stats():
    return _json(v2model.stats())


@app.get("/v2/models/{m}")
@app.get("/v2/models/{m}/versions/{v}")
async def metadata(m: str, v: str = ""):
    return _json(v2model.METADATA) if m == v2model.NAME else _unknown(m)


@app.get("/v2/models/{m}/ready")
async def model_ready(m: str):
    return Response(status_code=200 if m == v2model.NAME else 404)


@app.get("/v2/models/{m}/config")
@app.get("/v2/models/{m}/versions/{v}/config")
async def config(m: str, v: str = ""):
    return _json(v2model.CONFIG) if m == v2model.NAME else _unknown(m)


@app.get("/v2/models/{m}/stats")
@app.get("/v2/models/{m}/versions/{v}/stats")
async def stats(m: str, v: str = ""):
    return _json(v2model.stats()) if m == v2model.NAME else _unknown(m)


@app.post("/v2/models/{m}/infer")
@app.post("/v2/models/{m}/versions/{v}/infer")
async def infer(m: str, request: Request, v: str = ""):
    if m != v2model.NAME:
        return _unknown(m)
    body = await request.body()
    try:
        return _json(v2model.infer(v2model.json_part(body, request.headers.get("inference-header-content-length"))))
    except (v2model.BadRequest, ValueError, KeyError) as e:
        return JSONResponse({"error": str(e)}, status_code=400)


if __name__ == "__main__":
    if "--help" in sys.argv or "-h" in sys.argv:
        print(__doc__)
        sys.exit(0)
    import uvicorn
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]) if len(sys.argv) > 1 else 8000)
