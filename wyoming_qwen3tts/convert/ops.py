"""Opset building blocks: the model as plain math on OpenVINO nodes.

Everything here takes and returns `ov.Output`s (nodes are accepted too); weights are numpy
arrays turned into constants by a `Weights` policy (fp32, or fp16 decompressed to f32 —
the pattern every OpenVINO plugin recognises; INT8 is applied afterwards by nncf).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import openvino as ov
from openvino import opset13 as op

Value = ov.Output | ov.Node

WEIGHT_FORMATS = ("int8", "int4", "fp16", "fp32")


def out(x: Value) -> ov.Output:
    return x.output(0) if isinstance(x, ov.Node) else x


def i64(values) -> ov.Output:
    return op.constant(np.asarray(values, np.int64)).output(0)


def f32(values) -> ov.Output:
    return op.constant(np.asarray(values, np.float32)).output(0)


@dataclass(frozen=True)
class Weights:
    """How numpy weights become graph constants. `fp16` stores half precision and converts
    to f32 in the graph (decompression), `fp32`, `int8` and `int4` store f32 (nncf compresses
    the MatMul/Gather weights of an `int8` or `int4` graph afterwards)."""

    fmt: str = "fp32"

    def __call__(self, array: np.ndarray) -> ov.Output:
        if self.fmt == "fp16":
            return op.convert(op.constant(np.asarray(array, np.float16)), ov.Type.f32).output(0)
        return op.constant(np.ascontiguousarray(array, np.float32)).output(0)


def linear(x: Value, w: ov.Output, b: ov.Output | None = None) -> ov.Output:
    """x @ w.T (+ b); w is [out, in] as stored by torch."""
    y = op.matmul(x, w, transpose_a=False, transpose_b=True)
    return out(op.add(y, b) if b is not None else y)


def rms_norm(x: Value, weight: ov.Output, eps: float) -> ov.Output:
    """weight * x / sqrt(mean(x², last axis) + eps)."""
    var = op.reduce_mean(op.power(x, f32(2.0)), i64([-1]), keep_dims=True)
    return out(op.multiply(weight, op.multiply(x, op.divide(f32(1.0), op.sqrt(op.add(var, f32(eps)))))))


def silu(x: Value) -> ov.Output:
    return out(op.swish(x))


def swiglu(x: Value, gate_up: ov.Output, down: ov.Output) -> ov.Output:
    """down(silu(gate(x)) * up(x)), gate and up stacked as the rows of one matrix."""
    gate, up = op.split(linear(x, gate_up), i64(-1), 2).outputs()
    return linear(op.multiply(silu(gate), up), down)


def _inv_freq(head_dim: int, theta: float) -> np.ndarray:
    """RoPE inverse frequencies, in float32 as the official code computes them."""
    return (1.0 / (np.float32(theta) ** (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim))))


def rope_tables(position_ids: Value, head_dim: int, theta: float) -> tuple[ov.Output, ov.Output]:
    """cos, sin [B, 1, T, D] of standard rotate-half RoPE for position ids [B, T]."""
    inv_freq = _inv_freq(head_dim, theta)
    pos = op.convert(op.unsqueeze(position_ids, i64([2])), ov.Type.f32)  # [B,T,1]
    freqs = op.multiply(pos, f32(inv_freq.astype(np.float32)[None, None, :]))  # [B,T,D/2]
    emb = op.concat([freqs, freqs], axis=-1)
    emb = op.unsqueeze(emb, i64([1]))  # [B,1,T,D]
    return out(op.cos(emb)), out(op.sin(emb))


def rope_constants(positions: list[int], head_dim: int, theta: float) -> tuple[ov.Output, ov.Output]:
    """cos, sin [1, 1, T, D] for positions known when the graph is built (the code
    predictor's 0..15), computed in float32 as the official code does."""
    inv_freq = _inv_freq(head_dim, theta)
    freqs = np.asarray(positions, np.float32)[:, None] * inv_freq.astype(np.float32)[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)[None, None]
    return f32(np.cos(emb).astype(np.float32)), f32(np.sin(emb).astype(np.float32))


def apply_rope(x: Value, cos: ov.Output, sin: ov.Output, head_dim: int, fusable: bool = True) -> ov.Output:
    """x [B, heads, T, D] rotated: x·cos + rotate_half(x)·sin, rotate_half = [-x2, x1].

    fusable=True writes rotate_half as Slice/Negative/Concat, the pattern the CPU plugin
    fuses into its RoPE kernel (right for the talker's runtime positions). fusable=False
    writes it as a Gather and a sign vector, which no fusion matches: the fused kernel
    gave wrong values for the code predictor's constant positions (OpenVINO 2026.4.1).
    """
    half = head_dim // 2
    if fusable:
        x1 = op.slice(x, i64([0]), i64([half]), i64([1]), i64([-1]))
        x2 = op.slice(x, i64([half]), i64([head_dim]), i64([1]), i64([-1]))
        rotated = op.concat([op.negative(x2), x1], axis=-1)
    else:
        swap = np.concatenate([np.arange(half, head_dim), np.arange(0, half)])
        sign = np.concatenate([-np.ones(half), np.ones(half)]).astype(np.float32)
        rotated = op.multiply(op.gather(x, i64(swap), i64(-1)), f32(sign))
    return out(op.add(op.multiply(x, cos), op.multiply(rotated, sin)))


def split_heads(x: Value, heads: int, head_dim: int) -> ov.Output:
    """[B, T, heads*D] -> [B, T, heads, D]."""
    return out(op.reshape(x, i64([0, 0, heads, head_dim]), special_zero=True))


def to_bhtd(x: Value) -> ov.Output:
    """[B, T, heads, D] -> [B, heads, T, D]."""
    return out(op.transpose(x, i64([0, 2, 1, 3])))


def merge_heads(x: Value, width: int) -> ov.Output:
    """[B, heads, T, D] -> [B, T, heads*D]."""
    return out(op.reshape(op.transpose(x, i64([0, 2, 1, 3])), i64([0, 0, width]), special_zero=True))


def repeat_kv(x: Value, groups: int, heads: int, head_dim: int) -> ov.Output:
    """GQA as HF's repeat_kv exports it — Unsqueeze → Broadcast(constant target) → Reshape —
    the pattern both the paged-attention pass and the CPU SDPA fusion recognise."""
    if groups == 1:
        return out(x)
    x = op.unsqueeze(x, i64([2]))  # [B, Hkv, 1, T, D]
    x = op.broadcast(x, i64([1, 1, groups, 1, 1]), broadcast_spec="BIDIRECTIONAL")
    return out(op.reshape(x, i64([0, heads, -1, head_dim]), special_zero=True))


def explicit_attention(q: Value, k: Value, v: Value, scale: ov.Output, causal: bool = False,
                       bias: Value | None = None) -> ov.Output:
    """softmax(q kᵀ · scale [+ causal mask] [+ bias]) v for q [B,H,Tq,D], k/v [B,H,Tk,D].

    The causal mask needs static Tq and Tk (the code predictor's first step: 2 and 2); it
    is an additive constant (0 / float32 min, bottom-right aligned, as transformers builds
    it). A Select against -inf computed in-graph gave wrong values after an IR round trip
    on the CPU plugin (OpenVINO 2026.4.1), the constant does not. `bias` is an additive
    mask computed in the graph from positions (codec.seen_to_bias), for dynamic lengths."""
    scores = op.multiply(op.matmul(q, k, transpose_a=False, transpose_b=True), scale)
    if bias is not None:
        scores = op.add(scores, bias)
    if causal:
        tq, tk = out(q).get_partial_shape()[2], out(k).get_partial_shape()[2]
        if not (tq.is_static and tk.is_static):
            raise ValueError("explicit causal attention needs static query and key lengths")
        rows, cols = np.arange(tq.get_length())[:, None], np.arange(tk.get_length())[None, :]
        mask = np.where(cols > rows + (tk.get_length() - tq.get_length()), np.finfo(np.float32).min, 0.0)
        scores = op.add(scores, f32(mask.astype(np.float32)))
    return out(op.matmul(op.softmax(scores, axis=-1), v, transpose_a=False, transpose_b=False))
