import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """examples/custom_backend/vecop.c's batched mode in Python: OUT = scale * (A + B) + offset,
    FP32, each request of a batch answered on its own; `scale` from the model config (default 1),
    `offset` from the request's parameters (default 0), in the same float arithmetic as the C."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.scale = np.float32(config["parameters"].get("scale", {}).get("string_value", "1"))

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            if a.shape != b.shape:
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError("vecop: inputs A and B differ in shape")))
                continue
            out = self.scale * (a + b)
            offset = json.loads(request.parameters() or "{}").get("offset", 0)
            if offset:
                out = (out.astype(np.float64) + offset).astype(np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", out)]))
        return responses
