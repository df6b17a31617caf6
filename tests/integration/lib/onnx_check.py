#!/usr/bin/python3
# Debian's ONNX checker on a file, for tests/integration/onnx.test.mjs: runs
# onnx.checker.check_model with full_check (which also infers every value's
# type and shape, strictly), then prints what the test asserts on as one JSON
# object. Exits non-zero, with the checker's message, on a model it refuses.
# Run with /usr/bin/python3 (Debian's python3-onnx), not a pyenv python.
import json
import sys

import onnx

model = onnx.load(sys.argv[1])
onnx.checker.check_model(model, full_check=True)
inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)


def dims(value):
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


print(json.dumps({
    "onnx_version": onnx.__version__,
    "ir_version": model.ir_version,
    "opsets": {o.domain: o.version for o in model.opset_import},
    "producer": [model.producer_name, model.producer_version],
    "metadata": {p.key: p.value for p in model.metadata_props},
    "ops": [n.op_type for n in model.graph.node],
    "initializer_types": sorted({onnx.TensorProto.DataType.Name(t.data_type)
                                 for t in model.graph.initializer
                                 if not t.name.startswith("kiln:axes")}),
    "inputs": [[v.name, dims(v)] for v in model.graph.input],
    "outputs": [[v.name, dims(v)] for v in inferred.graph.output],
}))
