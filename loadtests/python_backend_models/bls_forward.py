import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """A BLS pipeline of one step: every request's inputs go, under the same names, to the model
    named by the config parameter `target` through the server (InferenceRequest.exec()), and its
    outputs come back as this model's. `add_batch_dim: "1"` sends each input as a batch of one
    (for a target with max_batch_size > 0) and takes the batch dimension off the outputs."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        params = config["parameters"]
        self.target = params["target"]["string_value"]
        self.add_batch_dim = params.get("add_batch_dim", {}).get("string_value") == "1"
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            inputs = []
            for tensor in request.inputs():
                value = tensor.as_numpy()
                inputs.append(pb_utils.Tensor(tensor.name(), value[None] if self.add_batch_dim else value))
            response = pb_utils.InferenceRequest(
                model_name=self.target, inputs=inputs, requested_output_names=self.outputs,
            ).exec()
            if response.has_error():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(response.error().message())))
                continue
            outputs = []
            for name in self.outputs:
                value = pb_utils.get_output_tensor_by_name(response, name).as_numpy()
                outputs.append(pb_utils.Tensor(name, value[0] if self.add_batch_dim else value))
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
