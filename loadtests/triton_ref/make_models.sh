#!/usr/bin/env bash
# Writes the python-backend model repository that probe.py and docs/triton-reference.md use.
#   loadtests/triton_ref/make_models.sh [DIR]   (default /work/ref/models)
# add_sub [16] FP32 (max_batch_size 8), identity [-1] FP32, classify (label_filename), slow
# (2 s per execution), broken (unknown config field), failing (initialize raises), unloaded.
set -euo pipefail
D="${1:-/work/ref/models}"
mkdir -p "$D"
mkdir -p "$D/add_sub"
cat > "$D/add_sub/config.pbtxt" <<'EOF_FILE'
name: "add_sub"
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 16 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
EOF_FILE
mkdir -p "$D/add_sub/1"
cat > "$D/add_sub/1/model.py" <<'EOF_FILE'
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            a = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(r, "INPUT1").as_numpy()
            out.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return out
EOF_FILE
mkdir -p "$D/broken"
cat > "$D/broken/config.pbtxt" <<'EOF_FILE'
name: "broken"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
not_a_field: 3
EOF_FILE
mkdir -p "$D/broken/1"
cat > "$D/broken/1/model.py" <<'EOF_FILE'
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
EOF_FILE
mkdir -p "$D/classify"
cat > "$D/classify/config.pbtxt" <<'EOF_FILE'
name: "classify"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] label_filename: "labels.txt" },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
EOF_FILE
mkdir -p "$D/classify"
cat > "$D/classify/labels.txt" <<'EOF_FILE'
cat
dog
bird
fish
EOF_FILE
mkdir -p "$D/classify/1"
cat > "$D/classify/1/model.py" <<'EOF_FILE'
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT0", x), pb_utils.Tensor("OUTPUT1", x)]))
        return out
EOF_FILE
mkdir -p "$D/failing"
cat > "$D/failing/config.pbtxt" <<'EOF_FILE'
name: "failing"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
EOF_FILE
mkdir -p "$D/failing/1"
cat > "$D/failing/1/model.py" <<'EOF_FILE'
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("deliberate failure in initialize")

    def execute(self, requests):
        return []
EOF_FILE
mkdir -p "$D/identity"
cat > "$D/identity/config.pbtxt" <<'EOF_FILE'
name: "identity"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
EOF_FILE
mkdir -p "$D/identity/1"
cat > "$D/identity/1/model.py" <<'EOF_FILE'
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
EOF_FILE
mkdir -p "$D/slow"
cat > "$D/slow/config.pbtxt" <<'EOF_FILE'
name: "slow"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
EOF_FILE
mkdir -p "$D/slow/1"
cat > "$D/slow/1/model.py" <<'EOF_FILE'
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(2)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
EOF_FILE
mkdir -p "$D/unloaded"
cat > "$D/unloaded/config.pbtxt" <<'EOF_FILE'
name: "unloaded"
backend: "python"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
EOF_FILE
mkdir -p "$D/unloaded/1"
cat > "$D/unloaded/1/model.py" <<'EOF_FILE'
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
EOF_FILE
