"""Counts the animals a text names, for `text_classify`: the kind of pre-processing a model.py
does before an ONNX model (here `classify`) in an ensemble."""
import json
import re

import numpy as np
import triton_python_backend_utils as pb_utils

# The words of each class, in the order of classify's labels.txt (cat, dog, bird, fish).
WORDS = [
    {"cat", "cats", "kitten", "kittens", "kitty"},
    {"dog", "dogs", "puppy", "puppies", "hound", "hounds"},
    {"bird", "birds", "chick", "chicks", "sparrow", "sparrows"},
    {"fish", "fishes", "trout", "salmon"},
]


class TritonPythonModel:
    def initialize(self, args):
        config = pb_utils.get_output_config_by_name(json.loads(args["model_config"]), "COUNTS")
        self.dtype = pb_utils.triton_string_to_numpy(config["data_type"])
        pb_utils.Logger.log_info(f"animal_words ready on {args['model_instance_name']}")

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy().reshape(-1)[0]
            if isinstance(text, bytes):
                text = text.decode("utf-8", errors="replace")
            words = re.findall(r"[a-z]+", text.lower())
            counts = np.array([sum(w in vocabulary for w in words) for vocabulary in WORDS], dtype=self.dtype)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("COUNTS", counts)]))
        return responses

