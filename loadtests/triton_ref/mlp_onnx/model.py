"""Triton python-backend model: an ONNX file run through onnxruntime, for side-by-side benchmarks
against Tritium's ONNX backend (real Triton 2.51 here has no ONNX Runtime backend).

Every request of a dynamic batch is concatenated along the batch dimension, run once, and split
back. The ONNX file is `model.onnx` beside this file (targets.py copies the bundled mlp there);
parameters "intra_op_thread_count" (0 or absent = ONNX Runtime's default, as Tritium with one
instance).
"""
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json
        cfg = json.loads(args["model_config"])
        intra = int(cfg.get("parameters", {}).get("intra_op_thread_count", {}).get("string_value", "0") or 0)
        so = ort.SessionOptions()
        if intra > 0:
            so.intra_op_num_threads = intra
        so.inter_op_num_threads = 1
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model.onnx")
        self.session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def execute(self, requests):
        per = [[pb_utils.get_input_tensor_by_name(r, n).as_numpy() for n in self.inputs] for r in requests]
        sizes = [p[0].shape[0] for p in per]
        feeds = {n: (per[0][k] if len(per) == 1 else np.concatenate([p[k] for p in per]))
                 for k, n in enumerate(self.inputs)}
        results = self.session.run(self.outputs, feeds)
        out, start = [], 0
        for s in sizes:
            out.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor(n, v[start:start + s]) for n, v in zip(self.outputs, results)]))
            start += s
        return out
