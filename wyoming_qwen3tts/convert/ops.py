"""Model building blocks as plain math on graph tensors (`expr.T`).

Weights are numpy arrays turned into constants by a `Weights` policy (fp32, or fp16
decompressed to f32 — the pattern every OpenVINO plugin recognises; INT8 is applied
afterwards by nncf) and read by checkpoint name through a `Params` view.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import openvino as ov

from ..model.checkpoint import TensorStore
from .expr import T, cat, f32, i64, op
from .spill import WeightSpill

WEIGHT_FORMATS = ("int8", "int4", "mixed", "fp16", "fp32")
SPILL_BLOCK_BYTES = 64 * 2**20  # f32 rows widened at a time for a spilled checkpoint tensor


@dataclass(frozen=True)
class Weights:
    """How numpy weights become graph constants. `fp16` stores half precision and converts
    to f32 in the graph (decompression), `fp32`, `int8` and `int4` store f32 (nncf compresses
    the MatMul/Gather weights of an `int8` or `int4` graph afterwards). With a `spill`, the
    constants beyond its budget live in a scratch file instead of RAM (convert/spill.py)."""

    fmt: str = "fp32"
    spill: WeightSpill | None = None

    def __call__(self, array: np.ndarray) -> T:
        stored = np.asarray(array, np.float16) if self.fmt == "fp16" else np.ascontiguousarray(array, np.float32)
        constant = T(self.spill.constant(stored)) if self.spill is not None else op.constant(stored)
        return self._decompressed(constant)

    def load(self, store: TensorStore, name: str) -> T:
        """Checkpoint tensor `name` as a constant, widened a block of rows at a time when spilling
        (the f32 text table alone is 1.24 GB)."""
        if self.spill is None:
            return self(store.get(name))
        dtype = np.float16 if self.fmt == "fp16" else np.float32
        blocks = (block.astype(dtype, copy=False) for block in store.row_blocks(name, SPILL_BLOCK_BYTES))
        return self._decompressed(T(self.spill.constant_from_blocks(store.shape(name), dtype, blocks)))

    def _decompressed(self, constant: T) -> T:
        return op.convert(constant, ov.Type.f32) if self.fmt == "fp16" else constant


@dataclass(frozen=True)
class Params:
    """A block's tensors by checkpoint name: `p.self_attn.o_proj` views the prefix
    `….self_attn.o_proj.`, `p.layers[3]` the prefix `….layers.3.`. Matrices go through the
    weight policy (`matrix`); small tensors (norms, biases, scales) stay f32 (`const`)."""

    store: TensorStore
    weights: Weights
    prefix: str = ""

    def __getattr__(self, name: str) -> Params:
        if name.startswith("__"):  # copy, pickle and friends probe dunders
            raise AttributeError(name)
        return Params(self.store, self.weights, f"{self.prefix}{name}.")

    def __getitem__(self, index: int) -> Params:
        return Params(self.store, self.weights, f"{self.prefix}{index}.")

    def __contains__(self, name: str) -> bool:
        return self.prefix + name in self.store

    def array(self, name: str) -> np.ndarray:
        return self.store.get(self.prefix + name)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.store.shape(self.prefix + name))

    def matrix(self, name: str = "weight") -> T:
        return self.weights.load(self.store, self.prefix + name)

    def const(self, name: str = "weight") -> T:
        return f32(self.array(name))

    def __call__(self, x: T) -> T:
        """nn.Linear: x @ weightᵀ, + bias if the checkpoint has one."""
        return linear(x, self.matrix(), self.const("bias") if "bias" in self else None)


def linear(x: T, w: T, b: T | None = None) -> T:
    """x @ w.T (+ b); w is [out, in] as stored by torch."""
    y = x.matmul_t(w)
    return y + b if b is not None else y


def rms_norm(x: T, weight: T, eps: float) -> T:
    """weight * x / sqrt(mean(x², last axis) + eps), in the op form OpenVINO's RMS fusion matches."""
    var = (x ** 2.0).mean(-1, keepdim=True)
    return weight * (x * (f32(1.0) / (var + eps).sqrt()))


def swiglu(x: T, gate_up: T, down: T) -> T:
    """down(silu(gate(x)) * up(x)), gate and up stacked as the rows of one matrix."""
    gate, up = linear(x, gate_up).chunk(2, -1)
    return linear(op.swish(gate) * up, down)


def _inv_freq(head_dim: int, theta: float) -> np.ndarray:
    """RoPE inverse frequencies, in float32 as the official code computes them."""
    return (1.0 / (np.float32(theta) ** (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim))))


def rope_tables(position_ids: T, head_dim: int, theta: float) -> tuple[T, T]:
    """cos, sin [B, 1, T, D] of standard rotate-half RoPE for position ids [B, T]."""
    freqs = position_ids.unsqueeze(2).float() * _inv_freq(head_dim, theta)[None, None, :]  # [B,T,D/2]
    emb = cat([freqs, freqs], -1).unsqueeze(1)  # [B,1,T,D]
    return op.cos(emb), op.sin(emb)


class ConstantRope:
    """RoPE at positions known when the graph is built (the code predictor's 0..15) as one
    small MatMul per tensor instead of a Gather and two Multiplies: x·cos + rotate_half(x)·sin
    = x @ R with R = I·cos + J·sin, where rotate_half(x) = [-x2, x1] = x @ J (cos, sin in
    float32 as the official code computes them).

    R is a constant expression that the plugin folds when it compiles, not one Constant:
    nncf would take a Constant multiplying an activation for a weight and compress it."""

    def __init__(self, head_dim: int, theta: float) -> None:
        half = head_dim // 2
        swap = np.zeros((head_dim, head_dim), np.float32)
        swap[np.arange(half) + half, np.arange(half)] = -1.0  # out j < D/2 takes -x[j + D/2]
        swap[np.arange(half), np.arange(half) + half] = 1.0  # out j ≥ D/2 takes x[j - D/2]
        self.eye, self.swap = f32(np.eye(head_dim, dtype=np.float32)), f32(swap)  # shared by every R
        self.inv_freq = _inv_freq(head_dim, theta)

    def __call__(self, positions: list[int], scale: float = 1.0) -> T:
        """scale · R [T, D, D], R[t] for position t; x [B, T, heads, D] @ R rotates every head."""
        freqs = np.asarray(positions, np.float32)[:, None] * self.inv_freq.astype(np.float32)[None, :]
        emb = np.concatenate([freqs, freqs], axis=-1)[:, None, :]  # [T, 1, D]: scales R's columns
        cos, sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
        return self.eye * (cos * np.float32(scale)) + self.swap * (sin * np.float32(scale))


def apply_rope(x: T, cos: T, sin: T, head_dim: int, fusable: bool = True) -> T:
    """x [B, heads, T, D] rotated: x·cos + rotate_half(x)·sin, rotate_half = [-x2, x1].

    fusable=True writes rotate_half as Slice/Negative/Concat, the pattern the CPU plugin
    fuses into its RoPE kernel (right for the talker's runtime positions). fusable=False
    (the codec graphs) writes it as a Gather and a sign vector, which no fusion matches: the
    fused kernel once gave wrong values at constant positions (OpenVINO 2026.4.1; the code
    predictor now rotates by a matrix instead), and the codec's IR stays as it was tested.
    """
    half = head_dim // 2
    if fusable:
        x1, x2 = x.slice(0, half, -1), x.slice(half, head_dim, -1)
        rotated = cat([-x2, x1], -1)
    else:
        swap = np.concatenate([np.arange(half, head_dim), np.arange(0, half)])
        rotated = x.gather(swap, -1) * np.concatenate([-np.ones(half), np.ones(half)])
    return x * cos + rotated * sin


def split_heads(x: T, heads: int, head_dim: int) -> T:
    """[B, T, heads*D] -> [B, T, heads, D] (then .transpose(0, 2, 1, 3) for [B, heads, T, D])."""
    return x.reshape(0, 0, heads, head_dim)


def merge_heads(x: T, width: int) -> T:
    """[B, heads, T, D] -> [B, T, heads*D]."""
    return x.transpose(0, 2, 1, 3).reshape(0, 0, width)


def repeat_kv(x: T, groups: int, heads: int, head_dim: int) -> T:
    """GQA as HF's repeat_kv exports it — Unsqueeze → Broadcast(constant target) → Reshape —
    the pattern both the paged-attention pass and the CPU SDPA fusion recognise."""
    if groups == 1:
        return x
    x = op.broadcast(x.unsqueeze(2), i64([1, 1, groups, 1, 1]), broadcast_spec="BIDIRECTIONAL")  # [B,Hkv,g,T,D]
    return x.reshape(0, heads, -1, head_dim)


def explicit_attention(q: T, k: T, v: T, scale: T | None, causal: bool = False, bias: T | None = None) -> T:
    """softmax(q kᵀ [· scale] [+ causal mask] [+ bias]) v for q [B,H,Tq,D], k/v [B,Hkv,Tk,D].

    With fewer key/value heads (GQA, g = H/Hkv) each kv head attends with its g query heads
    in one product instead of being repeated: HF's repeat_kv gives kv head i to query
    heads i·g … i·g+g−1, so q is viewed as [B, Hkv, g·Tq, D] (rows: head, then position)
    and the result viewed back. The causal mask needs static Tq and Tk (the code predictor's
    first step: 2 and 2); it is an additive constant (0 / float32 min, bottom-right aligned,
    as transformers builds it). A Select against -inf computed in-graph gave wrong values
    after an IR round trip on the CPU plugin (OpenVINO 2026.4.1), the constant does not.
    `bias` is an additive mask computed in the graph from positions (codec.seen_to_bias),
    for dynamic lengths. scale None: q is scaled already."""
    heads, kv_heads = q.dim(1), k.dim(1)
    groups = heads // kv_heads
    if groups > 1 and bias is not None:
        raise ValueError("explicit_attention: a bias mask with grouped queries is not supported (repeat_kv first)")
    if groups > 1:
        q = q.reshape(0, kv_heads, -1, q.dim(3))
    scores = q.matmul_t(k)
    if scale is not None:
        scores = scores * scale
    if bias is not None:
        scores = scores + bias
    if causal:
        tq, tk = q.o.get_partial_shape()[2], k.o.get_partial_shape()[2]
        if not (tq.is_static and tk.is_static):
            raise ValueError("explicit causal attention needs static query and key lengths")
        queries, keys = tq.get_length() // groups, tk.get_length()
        rows, cols = np.tile(np.arange(queries), groups)[:, None], np.arange(keys)[None, :]  # a row's query position
        scores = scores + np.where(cols > rows + (keys - queries), np.finfo(np.float32).min, 0.0)
    out = scores.softmax(-1) @ v
    return out.reshape(0, heads, -1, out.dim(3)) if groups > 1 else out
