#!/usr/bin/env python3
"""Generates the ONNX models the real-server rig and tests serve.

Random weights (a seeded numpy generator): throughput does not depend on their
values, only on the shapes and the precision. Two families at several sizes:

- ``mlp``: ``[batch, width]`` float32 in, ``depth`` MatMul+Add+Relu layers of
  ``width`` units, a 16-unit head;
- ``conv``: ``[batch, 3, size, size]`` float32 in (the image size is a dynamic
  dimension, so it is a client-side knob), stride-2 3x3 convolutions,
  global average pooling, a 16-unit head.

Each model comes in fp32 and, with ``--int8``, int8 (ONNX Runtime's dynamic
quantiser: weights stored as int8/uint8, activations quantised at run time).
Files are ``{family}-{size}-{precision}.onnx``; ``models.json`` beside them lists
what was written (file, family, size, precision, input name and shape, bytes).

Usage: make_onnx.py --out DIR [--family mlp|conv ...] [--size s|m|l ...] [--int8] [--seed N]

Opset 17 / IR 8 so that any ONNX Runtime of the last years loads the files
(the onnx package's default opset can be newer than the runtime's).
"""

import argparse
import json
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
HEAD = 16

# size name -> (mlp width, mlp depth) and (conv channels, conv blocks)
MLP_SIZES = {"s": (256, 3), "m": (512, 4), "l": (1024, 6)}
CONV_SIZES = {"s": (16, 3), "m": (32, 4), "l": (64, 5)}


def _init(rng, name, shape, fan_in):
    w = (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)
    return numpy_helper.from_array(w, name)


def mlp(size, rng):
    width, depth = MLP_SIZES[size]
    nodes, inits = [], []
    x = "input"
    for i in range(depth):
        inits.append(_init(rng, f"w{i}", (width, width), width))
        inits.append(numpy_helper.from_array(np.zeros(width, np.float32), f"b{i}"))
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"mm{i}"]))
        nodes.append(helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"add{i}"]))
        nodes.append(helper.make_node("Relu", [f"add{i}"], [f"h{i}"]))
        x = f"h{i}"
    inits.append(_init(rng, "whead", (width, HEAD), width))
    nodes.append(helper.make_node("MatMul", [x, "whead"], ["output"]))
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", width])
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", HEAD])
    graph = helper.make_graph(nodes, f"mlp-{size}", [inp], [out], inits)
    return graph, ["batch", width]


def conv(size, rng):
    channels, blocks = CONV_SIZES[size]
    nodes, inits = [], []
    x, cin = "input", 3
    for i in range(blocks):
        cout = channels * (2 ** min(i, 2))
        inits.append(_init(rng, f"k{i}", (cout, cin, 3, 3), cin * 9))
        inits.append(numpy_helper.from_array(np.zeros(cout, np.float32), f"kb{i}"))
        nodes.append(
            helper.make_node(
                "Conv", [x, f"k{i}", f"kb{i}"], [f"c{i}"], kernel_shape=[3, 3],
                strides=[2, 2], pads=[1, 1, 1, 1],
            )
        )
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        x, cin = f"r{i}", cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["pooled"]))
    nodes.append(helper.make_node("Flatten", ["pooled"], ["flat"], axis=1))
    inits.append(_init(rng, "whead", (cin, HEAD), cin))
    nodes.append(helper.make_node("MatMul", ["flat", "whead"], ["output"]))
    inp = helper.make_tensor_value_info(
        "input", TensorProto.FLOAT, ["batch", 3, "size", "size"]
    )
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT, ["batch", HEAD])
    graph = helper.make_graph(nodes, f"conv-{size}", [inp], [out], inits)
    return graph, ["batch", 3, "size", "size"]


def _save_atomically(model_proto, path):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".onnx.tmp")
    os.close(fd)
    onnx.save(model_proto, tmp)
    os.replace(tmp, path)


def _quantise(src, dst):
    # Imported here: only --int8 needs onnxruntime.
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    # The quantiser advises pre-processing on every call (a root-logger
    # warning); the graphs here are already in the form it wants.
    logging.getLogger().setLevel(logging.ERROR)

    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dst), suffix=".onnx.tmp")
    os.close(fd)
    # uint8 weights: ONNX Runtime's CPU ConvInteger takes uint8 only; MatMul
    # takes either.
    quantize_dynamic(src, tmp, weight_type=QuantType.QUInt8)
    os.replace(tmp, dst)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="directory to write into")
    p.add_argument("--family", action="append", choices=["mlp", "conv"])
    p.add_argument("--size", action="append", choices=sorted(MLP_SIZES))
    p.add_argument("--int8", action="store_true", help="also write int8 variants")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    families = args.family or ["mlp"]
    sizes = args.size or ["s"]
    os.makedirs(args.out, exist_ok=True)
    listing = []
    for family in families:
        for size in sizes:
            # One stream per model, so adding a model changes no other's weights.
            seed = [args.seed, ["mlp", "conv"].index(family), sorted(MLP_SIZES).index(size)]
            rng = np.random.default_rng(seed)
            graph, shape = (mlp if family == "mlp" else conv)(size, rng)
            model = helper.make_model(
                graph, opset_imports=[helper.make_opsetid("", OPSET)],
                producer_name="mfsched-rig",
            )
            model.ir_version = IR_VERSION
            onnx.checker.check_model(model)
            fp32 = os.path.join(args.out, f"{family}-{size}-fp32.onnx")
            _save_atomically(model, fp32)
            written = [("fp32", fp32)]
            if args.int8:
                int8 = os.path.join(args.out, f"{family}-{size}-int8.onnx")
                _quantise(fp32, int8)
                written.append(("int8", int8))
            for precision, path in written:
                listing.append({
                    "file": os.path.basename(path), "family": family, "size": size,
                    "precision": precision, "input": "input", "shape": shape,
                    "bytes": os.path.getsize(path),
                })
    index = os.path.join(args.out, "models.json")
    with open(index + ".tmp", "w") as f:
        json.dump(listing, f, indent=2)
    os.replace(index + ".tmp", index)
    for m in listing:
        print(f"{m['file']}: {m['bytes']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
