"""How a derived model is built from a source ONNX file: what runs in int8 and why.

Run as `python -m vaultd.embedding.recipe SOURCE TARGET` (the cache in `derive.py` does, in a
child process). Needs the `onnx` package, which onnxruntime's quantization tools build on.

1. Fold: the source's int8-in-storage weights (int8 initializer, Cast, Mul by a per-column
   scale) become plain fp32 initializers, by onnxruntime's own constant folding (basic graph
   optimisations, saved with `optimized_model_filepath`): only standard ONNX operators.
2. Quantize the weight products: `quantize_dynamic` with per-channel symmetric int8 weights on
   the MatMuls whose second input is a weight. The shipped weights already are per-channel
   int8, and re-quantizing the folded ones gives the same int8 tensors bit for bit, so the
   weights lose nothing; the error is in the activations, quantized per run. The attention's
   activation-by-activation products stay in float: quantizing them moved vectors far.

`RECIPE` names this build; change it with any change to the steps, so a cache built by the old
steps is not taken for the new.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

RECIPE = "int8-dynamic-1"

#: Operators a weight passes through between its initializer and a MatMul, in a folded graph
#: or in the int8-in-storage form.
_WEIGHT_PATH_OPS = ("Cast", "Mul", "DequantizeLinear", "Transpose", "Reshape")


def weight_matmuls(model: Any) -> list[str]:
    """The MatMuls whose second input is a weight (an initializer, or constant ops over
    initializers), in graph order; the attention's products of two activations are not."""
    graph = model.graph
    constant = {init.name for init in graph.initializer}
    constant.update(out for node in graph.node if node.op_type == "Constant" for out in node.output)
    producer = {out: node for node in graph.node for out in node.output}

    def is_constant(name: str, depth: int = 0) -> bool:
        if name in constant:
            return True
        node = producer.get(name)
        if node is None or depth > 4 or node.op_type not in _WEIGHT_PATH_OPS:
            return False
        return all(is_constant(i, depth + 1) for i in node.input if i)

    return [n.name for n in graph.node if n.op_type == "MatMul" and is_constant(n.input[1])]


def build(source: Path, target: Path) -> None:
    """Write the derived model of `source` to `target` (same inputs, same bytes)."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".vaultd-build-") as work:
        folded = Path(work) / "folded.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(folded)
        options.log_severity_level = 3
        ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
        nodes = weight_matmuls(onnx.load(str(folded)))
        if not nodes:
            raise SystemExit(f"{source} has no MatMul over a weight: nothing to run in int8")
        quantize_dynamic(
            str(folded),
            str(target),
            per_channel=True,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=["MatMul"],
            nodes_to_quantize=nodes,
        )


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m vaultd.embedding.recipe SOURCE TARGET", file=sys.stderr)
        return 2
    build(Path(argv[0]), Path(argv[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
