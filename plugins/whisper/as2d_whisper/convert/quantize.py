"""The int8 folder of a converted fp32 one: ONNX Runtime's dynamic quantization, activations per row."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

from ..graph_io import WINDOWS_FILE
from .onnx_export import DECODER_FILE, ENCODER_FILE
from .weights import package_version


def per_row_activations(model) -> int:
    """Make every dynamically quantized activation quantize each row (token) on its own; returns how many.

    ONNX Runtime's ``DynamicQuantizeLinear`` picks one scale for the whole input, so a
    token's logits would depend on the other tokens in the same call, and a batched
    verification could disagree with one-token steps (it did, on real speech). Each
    such node becomes a symmetric per-row quantization (scale = row max |x| / 127,
    zero point 128, still uint8 for ``MatMulInteger``): the integer product of a row
    then depends on that row alone, but not what feeds it: see ``quantize_target``.
    """
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    constants = {"per_row_zero_point": np.array(128, np.uint8), "per_row_levels": np.array(127.0, np.float32),
                 "per_row_offset": np.array(128.0, np.float32), "per_row_tiny": np.array(1e-12, np.float32),
                 "per_row_low": np.array(0.0, np.float32), "per_row_high": np.array(255.0, np.float32)}
    nodes, count = [], 0
    for node in graph.node:
        if node.op_type != "DynamicQuantizeLinear":
            nodes.append(node)
            continue
        x, (quantized, scale, zero_point) = node.input[0], node.output
        t = f"{node.name}_per_row"
        nodes += [
            helper.make_node("Abs", [x], [f"{t}_abs"]),
            helper.make_node("ReduceMax", [f"{t}_abs"], [f"{t}_max"], axes=[-1], keepdims=1),
            helper.make_node("Max", [f"{t}_max", "per_row_tiny"], [f"{t}_range"]),
            helper.make_node("Div", [f"{t}_range", "per_row_levels"], [scale]),
            helper.make_node("Div", [x, scale], [f"{t}_ratio"]),
            helper.make_node("Round", [f"{t}_ratio"], [f"{t}_round"]),
            helper.make_node("Add", [f"{t}_round", "per_row_offset"], [f"{t}_shift"]),
            helper.make_node("Clip", [f"{t}_shift", "per_row_low", "per_row_high"], [f"{t}_clip"]),
            helper.make_node("Cast", [f"{t}_clip"], [quantized], to=TensorProto.UINT8),
            helper.make_node("Identity", ["per_row_zero_point"], [zero_point]),
        ]
        count += 1
    if count:
        graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
        del graph.node[:]
        graph.node.extend(_row_scale_last(nodes))
    return count


def _row_scale_last(nodes: list) -> list:
    """``y = int_product * (row_scale * weight_scale)`` becomes ``(int_product * weight_scale) * row_scale``.

    ONNX Runtime's extended optimizations fuse MatMulInteger -> Cast -> Mul into one
    MatMulIntegerToFloat that reads the activation scale as a single number: with
    per-row scales it would apply the first row's to every row. Multiplying the row
    scale on its own, after the product, leaves nothing of that pattern to misread.
    """
    from onnx import helper

    row_scales = {n.output[0] for n in nodes if n.op_type == "Div" and n.input[1:] == ["per_row_levels"]}
    products = {}  # scale product -> (row scale, weight scale)
    for n in nodes:
        if n.op_type == "Mul" and n.input[0] in row_scales:
            products[n.output[0]] = (n.input[0], n.input[1])
    out = []
    for n in nodes:
        if n.op_type == "Mul" and n.output[0] in products:
            continue
        if n.op_type == "Mul" and n.input[1] in products:
            row, weight = products[n.input[1]]
            partial = n.output[0] + "_weight_scaled"
            out += [helper.make_node("Mul", [n.input[0], weight], [partial], name=n.name + "_weight_scale"),
                    helper.make_node("Mul", [partial, row], [n.output[0]], name=n.name + "_row_scale")]
            continue
        out.append(n)
    return out


def output_projection_nodes(model, n_vocab: int) -> list[str]:
    """Names of the nodes that read the [d_model, vocab] output weight (the logits MatMul, the tied token lookup)."""
    vocab_weights = {i.name for i in model.graph.initializer if len(i.dims) == 2 and i.dims[1] == n_vocab}
    return [n.name for n in model.graph.node if n.op_type in ("MatMul", "Gather") and vocab_weights & set(n.input)]


def quantize_target(fp32_dir: str | Path, out_dir: str | Path) -> Path:
    """Make an int8 model folder (``whisper-base-int8``) from a converted fp32 ONNX folder.

    ONNX Runtime's dynamic quantization of the exported graphs, no torch: seconds.

    - The encoder: every MatMul (its convolutions stay fp32). It runs once per request on
      the same audio for every method, so its rounding cannot split as2d from target-only.
    - The decoder (and its windows graph, the same way): only the output projection over the
      vocabulary (the largest weight, more than half of a step's memory traffic) and the tied token lookup, with its
      activations quantized per row (``per_row_activations``). Quantizing the layers'
      activations too made a batched verification differ from one-token steps on real
      speech: the fp32 attention's last-bit differences between call widths flip a
      rounding, and the flip grows through the quantized layers after it. At the last
      layer nothing follows, so only a near-tie of the logits could differ.

    The graphs keep the fp32 folder's file names, so the runtime reads the folder like any
    other; the model is one of its own, exact against its own greedy output.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    started = time.perf_counter()
    fp32_dir, out_dir = Path(fp32_dir).expanduser(), Path(out_dir).expanduser()
    missing = [f for f in ("model.json", "tokenizer.json", ENCODER_FILE, DECODER_FILE) if not (fp32_dir / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{fp32_dir} lacks {', '.join(missing)}: install the fp32 model first "
                                f"(`as2d models install {fp32_dir.name}`)")
    meta = json.loads((fp32_dir / "model.json").read_text())
    out_dir.mkdir(parents=True, exist_ok=True)
    decoders = [f for f in (DECODER_FILE, WINDOWS_FILE) if (fp32_dir / f).is_file()]
    outputs = {f: output_projection_nodes(onnx.load(str(fp32_dir / f)), meta["dims"]["n_vocab"]) for f in decoders}
    output_nodes = outputs[DECODER_FILE]
    plan = ((ENCODER_FILE, {"op_types_to_quantize": ["MatMul"]}),
            *((f, {"op_types_to_quantize": ["MatMul", "Gather"], "nodes_to_quantize": outputs[f]}) for f in decoders))
    for name, options in plan:
        tmp = out_dir / (name + ".tmp")
        quantize_dynamic(str(fp32_dir / name), str(tmp), weight_type=QuantType.QInt8, **options)
        if name in decoders:
            model = onnx.load(str(tmp))
            per_row_activations(model)
            onnx.save(model, str(tmp))
        tmp.replace(out_dir / name)
    shutil.copyfile(fp32_dir / "tokenizer.json", out_dir / "tokenizer.json")
    meta.pop("mnn", None)
    meta["name"] = f"{meta['name']}-int8"
    meta["int8"] = {"from": fp32_dir.name,
                    "method": "onnxruntime.quantization.quantize_dynamic, QInt8 weights: the encoder's MatMuls; "
                              "the decoder's output projection and token lookup (activations per row)",
                    "decoder_nodes": output_nodes,
                    "onnxruntime_version": package_version("onnxruntime")}
    tmp = out_dir / "model.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(out_dir / "model.json")  # last: a folder with model.json is complete
    print(f"[as2d-whisper] {meta['name']}: int8 graphs written into {out_dir} in {time.perf_counter() - started:.1f} s")
    return out_dir
