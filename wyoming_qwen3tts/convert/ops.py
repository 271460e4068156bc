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

WEIGHT_FORMATS = ("int8", "int4", "fp16", "fp32")


@dataclass(frozen=True)
class Weights:
    """How numpy weights become graph constants. `fp16` stores half precision and converts
    to f32 in the graph (decompression), `fp32`, `int8` and `int4` store f32 (nncf compresses
    the MatMul/Gather weights of an `int8` or `int4` graph afterwards)."""

    fmt: str = "fp32"

    def __call__(self, array: np.ndarray) -> T:
        if self.fmt == "fp16":
            return op.convert(op.constant(np.asarray(array, np.float16)), ov.Type.f32)
        return op.constant(np.ascontiguousarray(array, np.float32))


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
        return self.weights(self.array(name))

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


def rope_constants(positions: list[int], head_dim: int, theta: float) -> tuple[T, T]:
    """cos, sin [1, 1, T, D] for positions known when the graph is built (the code
    predictor's 0..15), computed in float32 as the official code does."""
    inv_freq = _inv_freq(head_dim, theta)
    freqs = np.asarray(positions, np.float32)[:, None] * inv_freq.astype(np.float32)[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)[None, None]
    return f32(np.cos(emb).astype(np.float32)), f32(np.sin(emb).astype(np.float32))


def apply_rope(x: T, cos: T, sin: T, head_dim: int, fusable: bool = True) -> T:
    """x [B, heads, T, D] rotated: x·cos + rotate_half(x)·sin, rotate_half = [-x2, x1].

    fusable=True writes rotate_half as Slice/Negative/Concat, the pattern the CPU plugin
    fuses into its RoPE kernel (right for the talker's runtime positions). fusable=False
    writes it as a Gather and a sign vector, which no fusion matches: the fused kernel
    gave wrong values for the code predictor's constant positions (OpenVINO 2026.4.1).
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


def explicit_attention(q: T, k: T, v: T, scale: T, causal: bool = False, bias: T | None = None) -> T:
    """softmax(q kᵀ · scale [+ causal mask] [+ bias]) v for q [B,H,Tq,D], k/v [B,H,Tk,D].

    The causal mask needs static Tq and Tk (the code predictor's first step: 2 and 2); it
    is an additive constant (0 / float32 min, bottom-right aligned, as transformers builds
    it). A Select against -inf computed in-graph gave wrong values after an IR round trip
    on the CPU plugin (OpenVINO 2026.4.1), the constant does not. `bias` is an additive
    mask computed in the graph from positions (codec.seen_to_bias), for dynamic lengths."""
    scores = q.matmul_t(k) * scale
    if bias is not None:
        scores = scores + bias
    if causal:
        tq, tk = q.o.get_partial_shape()[2], k.o.get_partial_shape()[2]
        if not (tq.is_static and tk.is_static):
            raise ValueError("explicit causal attention needs static query and key lengths")
        rows, cols = np.arange(tq.get_length())[:, None], np.arange(tk.get_length())[None, :]
        scores = scores + np.where(cols > rows + (tk.get_length() - tq.get_length()), np.finfo(np.float32).min, 0.0)
    return scores.softmax(-1) @ v
