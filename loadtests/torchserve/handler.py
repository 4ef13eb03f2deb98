"""TorchServe handler for the TorchScript mlp (loadtests/torchserve.py): a request's body is a
JSON list of 256 floats (one item); TorchServe hands the handler a batch of such requests (when
batching is configured), which run as one [n, 256] tensor through the module, without autograd;
each answer is the item's 256 outputs as a JSON list."""
import json
import os

import torch

_model = None


def handle(data, context):
    global _model
    if _model is None:
        _model = torch.jit.load(os.path.join(context.system_properties["model_dir"], "model.pt"))
        _model.eval()
    if data is None:
        return None
    items = []
    for request in data:
        body = request.get("body") if request.get("body") is not None else request.get("data")
        # TorchServe decodes an application/json body itself; other bodies arrive as bytes.
        items.append(json.loads(body) if isinstance(body, (bytes, bytearray, str)) else body)
    with torch.inference_mode():
        out = _model(torch.tensor(items, dtype=torch.float32))
    return [json.dumps(row) for row in out.tolist()]
