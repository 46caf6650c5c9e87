"""The int8 folder of a converted fp32 one: ONNX Runtime's dynamic quantization, activations per row."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

from ..graph_io import BEAM_WAVE_FILE, BEAMS_FILE, WINDOWS_FILE
from .onnx_export import DECODER_FILE, ENCODER_FILE, listing_graphs, save_graph
from .weights import package_version

# model.json's ``int8.recipe``: a folder quantized by an older recipe is quantized again on install
# (6: and a windows graph for beam waves, its layers in int8 as the beams graph's; 5: the beams graph quantized from
# the fp32 folder's own, which its rows read the prompt from once; 4: the same numbers in fewer nodes, opset 21;
# 3: and a beams graph with every decoder layer in int8; 2: weights per column,
# activations per row, the encoder's first layer fp32, the token lookup untied; 1: per tensor)
INT8_RECIPE = 6


def per_row_activations(model) -> int:
    """Make every dynamically quantized activation quantize each row (token) on its own; returns how many.

    ONNX Runtime's ``DynamicQuantizeLinear`` picks one scale for the whole input, so a
    token's logits would depend on the other tokens in the same call, and a batched
    verification could disagree with one-token steps (it did, on real speech). Each
    such node becomes a symmetric per-row quantization (scale = row max |x| / 127,
    zero point 128, uint8 for the integer product): the integer product of a row
    then depends on that row alone, but not what feeds it: see ``quantize_target``.
    In the encoder a scale per frame, not one per 30 s of audio, is what keeps it close to fp32.
    The rounding is one ``QuantizeLinear`` with a block as long as the row (opset 21; the model is converted up to
    it), and the product one ``MatMulIntegerToFloat`` (``_row_scale_last``): the same numbers as the five and three
    nodes they replace (BENCHMARKS.md section 35: the int8 encoder about an eighth faster, a beam step as fast).
    """
    from onnx import helper, numpy_helper

    if not any(n.op_type == "DynamicQuantizeLinear" for n in model.graph.node):
        return 0
    _opset_at_least(model, QUANTIZE_OPSET)
    graph = model.graph
    constants = {"per_row_zero_point": np.array(128, np.uint8), "per_row_zero_points": np.array([128], np.uint8),
                 "per_row_levels": np.array(127.0, np.float32), "per_row_tiny": np.array(1e-12, np.float32),
                 "per_row_last_axis": np.array([-1], np.int64),
                 "per_row_unit_scale": np.array(1.0, np.float32)}
    nodes, count = [], 0
    for node in graph.node:
        if node.op_type != "DynamicQuantizeLinear":
            nodes.append(node)
            continue
        x, (quantized, scale, zero_point) = node.input[0], node.output
        t = f"{node.name}_per_row"
        nodes += [
            helper.make_node("Abs", [x], [f"{t}_abs"]),
            helper.make_node("ReduceMax", [f"{t}_abs", "per_row_last_axis"], [f"{t}_max"], keepdims=1),
            helper.make_node("Max", [f"{t}_max", "per_row_tiny"], [f"{t}_range"]),
            helper.make_node("Div", [f"{t}_range", "per_row_levels"], [scale]),
        ]
        if not count:  # every activation of a graph has the same rows (its tokens or frames): one zero point each
            nodes += [helper.make_node("Shape", [scale], ["per_row_scale_shape"]),
                      helper.make_node("Expand", ["per_row_zero_points", "per_row_scale_shape"], ["per_row_zeros"])]
        nodes += [
            # one block per row: a block longer than any row (blocks are counted by ceil(row / block_size))
            helper.make_node("QuantizeLinear", [x, scale, "per_row_zeros"], [quantized], axis=-1, block_size=1 << 30),
            helper.make_node("Identity", ["per_row_zero_point"], [zero_point]),
        ]
        count += 1
    graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in constants.items())
    del graph.node[:]
    graph.node.extend(_row_scale_last(nodes))
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    # the converter's shape inference recorded each scale as one number; it is one per row now
    scales = {n.output[0] for n in graph.node if n.op_type == "Div" and n.input[1:] == ["per_row_levels"]}
    kept = [v for v in graph.value_info if v.name not in scales]
    del graph.value_info[:]
    graph.value_info.extend(kept)
    return count


# QuantizeLinear's blocks (one scale per row of the activation) came in ONNX opset 21
QUANTIZE_OPSET = 21


def _opset_at_least(model, version: int) -> None:
    """Convert ``model`` in place to the default domain's opset ``version`` where it is older (ONNX's own converter:
    ReduceMax's axes become an input, and so on)."""
    from onnx import version_converter

    current = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if current < version:
        model.CopyFrom(version_converter.convert_version(model, version))


def _row_scale_last(nodes: list) -> list:
    """``y = float(int_product) * (row_scale * weight_scale)`` becomes one ``MatMulIntegerToFloat`` that multiplies
    by the weight's scales (its activation scale a constant 1), then ``* row_scale``.

    ONNX Runtime's extended optimizations fuse MatMulInteger -> Cast -> Mul into a
    MatMulIntegerToFloat that reads the activation scale as a single number: with
    per-row scales it would apply the first row's to every row. Here the fused node gets the weight's scales
    only, and the row scale is multiplied on its own after it: the same numbers as the three nodes it replaces.
    """
    from onnx import helper

    row_scales = {n.output[0] for n in nodes if n.op_type == "Div" and n.input[1:] == ["per_row_levels"]}
    products = {}  # scale product -> (row scale, weight scale)
    for n in nodes:
        if n.op_type == "Mul" and n.input[0] in row_scales:
            products[n.output[0]] = (n.input[0], n.input[1])
    made = {n.output[0]: n for n in nodes}
    fused = set()  # the MatMulInteger and Cast nodes each fused node replaces
    out = []
    for n in nodes:
        if n.op_type == "Mul" and n.output[0] in products:
            continue
        if n.op_type == "Mul" and n.input[1] in products:
            row, weight = products[n.input[1]]
            cast = made[n.input[0]]
            product = made[cast.input[0]]
            if (cast.op_type, product.op_type) != ("Cast", "MatMulInteger"):
                raise RuntimeError(f"{n.name}: expected the quantizer's MatMulInteger -> Cast -> Mul, found "
                                   f"{product.op_type} -> {cast.op_type} -> Mul (an ONNX Runtime that quantizes "
                                   "otherwise?)")
            a, b, a_zero, b_zero = (list(product.input) + ["", ""])[:4]
            partial = n.output[0] + "_weight_scaled"
            out += [helper.make_node("MatMulIntegerToFloat", [a, b, "per_row_unit_scale", weight, a_zero, b_zero],
                                     [partial], name=product.name + "_to_float", domain="com.microsoft"),
                    helper.make_node("Mul", [partial, row], [n.output[0]], name=n.name + "_row_scale")]
            fused |= {id(cast), id(product)}
            continue
        out.append(n)
    return [n for n in out if id(n) not in fused]


def first_layer_products(model) -> list[str]:
    """The names of the encoder's first layer's weight products (its ``Gemm`` nodes), to keep in fp32.

    Its input is the convolutions' output plus the positional embedding, which 8-bit scales serve
    badly: left in fp32, the encoder's error on real clips falls from 10-12% to 4% (RMS).
    """
    return [n.name for n in model.graph.node if n.op_type == "Gemm" and n.name.startswith("/encoder/layers.0/")]


def _excluded(names: list[str]) -> list[str]:
    """``names`` as ``nodes_to_exclude``: ONNX Runtime turns a ``Gemm`` into a ``MatMul`` named ``<name>_MatMul``
    before it quantizes, and matches exclusions against either name."""
    return [*names, *(f"{n}_MatMul" for n in names)]


def _check_kept_fp32(model, names: list[str]) -> None:
    """Fail loudly if the quantizer did not leave ``names`` in fp32 (an ONNX Runtime that names nodes otherwise)."""
    left = {n.name for n in model.graph.node if n.op_type in ("Gemm", "MatMul")}
    missing = [n for n in names if n not in left and f"{n}_MatMul" not in left]
    if missing or not names:
        raise RuntimeError(f"the encoder's first layer should stay fp32, but the quantizer did not leave "
                           f"{missing or 'any layer'} (an ONNX Runtime that names nodes otherwise?)")


def untie_output_projection(model, n_vocab: int) -> list[str]:
    """Give the token lookup its own int8 copy of the tied [d_model, vocab] weight; returns the projection's nodes.

    Shared with the lookup, the weight could only be quantized with one scale for the whole vocabulary
    (ONNX Runtime quantizes a shared weight once, per tensor): tokens whose columns are small then lose
    most of their precision, and on long recordings greedy decodes dropped sentences (BENCHMARKS.md
    section 17). Untied, the projection is quantized with a scale per token (``per_channel``), and the
    lookup reads its column from a copy quantized the same way, scaled back after the gather. A lookup that
    read an fp16 copy of the weight (``torch_model.narrow_lookup``) holds the same numbers: it gets the same
    int8 copy, and the fp16 one goes.
    """
    from onnx import TensorProto, helper, numpy_helper

    weights = {i.name: numpy_helper.to_array(i).astype(np.float32, copy=False) for i in model.graph.initializer
               if len(i.dims) == 2 and i.dims[1] == n_vocab}
    nodes = []
    for node in model.graph.node:
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if node.op_type != "Gather" or node.input[0] not in weights or axis != 1:
            nodes.append(node)
            continue
        weight, (indices,), out = weights[node.input[0]], node.input[1:], node.output[0]
        scale = np.maximum(np.abs(weight).max(axis=0), 1e-12) / 127.0
        t = f"{node.input[0]}_lookup"
        model.graph.initializer.extend([
            numpy_helper.from_array(np.round(weight / scale).astype(np.int8), f"{t}_int8"),
            numpy_helper.from_array(scale.astype(np.float32), f"{t}_scale")])
        nodes += [helper.make_node("Gather", [f"{t}_int8", indices], [f"{out}_int8"], axis=1, name=f"{node.name}_int8"),
                  helper.make_node("Cast", [f"{out}_int8"], [f"{out}_float"], to=TensorProto.FLOAT),
                  helper.make_node("Gather", [f"{t}_scale", indices], [f"{out}_scale"], axis=0),
                  helper.make_node("Mul", [f"{out}_float", f"{out}_scale"], [out])]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    read = {name for node in nodes for name in node.input}
    kept = [i for i in model.graph.initializer if i.name not in weights or i.name in read]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and set(n.input) & set(weights)]


def quantize_decoder(graph, n_vocab: int, out_path: Path, layers: bool = False) -> list[str]:
    """A decoder graph (the decoder, its windows graph, the aligner) quantized as the int8 target's decoder is
    (``quantize_target``) and written to ``out_path``; returns the output projection's nodes. ``layers``: every
    weight product in int8, the layers' too (the beams graph)."""
    nodes = untie_output_projection(graph, n_vocab)
    _quantize(graph, out_path, **({} if layers else {"nodes_to_quantize": nodes}))
    return nodes


def _quantize(graph, out_path: Path, check=None, **options) -> None:
    """``graph``'s weight products in int8, a scale per column, their activations per row (``per_row_activations``),
    written to ``out_path`` (``save_graph``); ``check`` sees the quantized model first."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = out_path.with_name(out_path.name + ".tmp")
    quantize_dynamic(graph, str(tmp), weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"],
                     **options)
    model = onnx.load(str(tmp))
    tmp.unlink()
    per_row_activations(model)
    if check is not None:
        check(model)
    save_graph(model, out_path)


def quantize_target(fp32_dir: str | Path, out_dir: str | Path) -> Path:
    """Make an int8 model folder (``whisper-base-int8``) from a converted fp32 ONNX folder.

    ONNX Runtime's dynamic quantization of the exported graphs, no torch: seconds.

    - The encoder: every weight product after the first layer (``first_layer_products``; the
      convolutions stay fp32 too), with a scale per output column of each weight (``per_channel``)
      and per row (frame) of each activation (``per_row_activations``), the granularity CTranslate2's
      int8 uses. ONNX Runtime's default (one scale per weight, one per 1500-frame input, every layer)
      put 15-21% RMS error on the encoder's output on real clips and lost whole sentences on long
      recordings; this recipe puts about 4% (BENCHMARKS.md section 17). It runs once per request on the
      same audio for every method, so its rounding cannot split as2d from target-only.
    - The decoder (and its windows graph, the same way): only the output projection over the
      vocabulary (the largest weight, more than half of a step's memory traffic), with a scale per
      token (``untie_output_projection``: the token lookup gets an int8 copy of its own) and its
      activations per row (``per_row_activations``). Quantizing the layers' activations too made a
      batched verification differ from one-token steps on real speech: the fp32 attention's last-bit
      differences between call widths flip a rounding, and the flip grows through the quantized
      layers after it. At the last layer nothing follows, so only a near-tie of the logits could differ.
    - Beam search's own graph (``decoder.beams.onnx``, ``torch_model.decode_beams``): every weight product in int8,
      the layers' too, as CTranslate2's int8 has them. Beams compare no batched call with one-token steps (as2d
      runs beams as target-only does, ``as2d_core.decode.beam``), so nothing needs the layers in fp32 there, and
      a 5-beam step costs 27% less (BENCHMARKS.md section 18). Beams searched side by side (a file's windows, the
      server's requests: ``beams.WhisperBeamWave``) step on a windows graph of their own quantized the same way
      (``decoder.windows.beams.onnx``): every window's beams on it, a wave of one too.

    The graphs keep the fp32 folder's file names, so the runtime reads the folder like any
    other; the model is one of its own, exact against its own greedy output.
    """
    import onnx

    started = time.perf_counter()
    fp32_dir, out_dir = Path(fp32_dir).expanduser(), Path(out_dir).expanduser()
    missing = [f for f in ("model.json", "tokenizer.json", ENCODER_FILE, DECODER_FILE) if not (fp32_dir / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{fp32_dir} lacks {', '.join(missing)}: install the fp32 model first "
                                f"(`as2d models install {fp32_dir.name}`)")
    meta = json.loads((fp32_dir / "model.json").read_text())
    out_dir.mkdir(parents=True, exist_ok=True)
    plan = ((DECODER_FILE, DECODER_FILE, False), (WINDOWS_FILE, WINDOWS_FILE, False), (BEAMS_FILE, BEAMS_FILE, True),
            (WINDOWS_FILE, BEAM_WAVE_FILE, True))
    outputs = {out: quantize_decoder(onnx.load(str(fp32_dir / source)), meta["dims"]["n_vocab"], out_dir / out, layers)
               for source, out, layers in plan if (fp32_dir / source).is_file()}
    meta["files"] = listing_graphs(meta["files"], out_dir, list(outputs))
    output_nodes = outputs[DECODER_FILE]
    encoder = onnx.load(str(fp32_dir / ENCODER_FILE))
    kept_fp32 = first_layer_products(encoder)
    _quantize(encoder, out_dir / ENCODER_FILE, lambda model: _check_kept_fp32(model, kept_fp32),
              nodes_to_exclude=_excluded(kept_fp32))
    shutil.copyfile(fp32_dir / "tokenizer.json", out_dir / "tokenizer.json")
    meta.pop("mnn", None)
    meta["name"] = f"{meta['name']}-int8"
    meta["int8"] = {"from": fp32_dir.name,
                    "recipe": INT8_RECIPE,
                    "method": "onnxruntime.quantization.quantize_dynamic, QInt8 weights per column: the encoder's "
                              "products after its first layer, the decoder's output projection and, untied from it, "
                              "the token lookup; activations per row; the beams graphs (alone and side by side): "
                              "every decoder product",
                    "decoder_nodes": output_nodes,
                    "onnxruntime_version": package_version("onnxruntime")}
    tmp = out_dir / "model.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(out_dir / "model.json")  # last: a folder with model.json is complete
    print(f"[as2d-whisper] {meta['name']}: int8 graphs written into {out_dir} in {time.perf_counter() - started:.1f} s")
    return out_dir
