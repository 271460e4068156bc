"""A thin expression layer over OpenVINO's opset, so the converters read as the model's math.

`ov.Output` has no Python operators; `T` wraps one and adds them (`+ - * / @ **`, unary
minus, `< <= > >=`, `& |` on booleans) with torch-like methods for the shape ops the
converters use. Python scalars and numpy arrays become constants of the other operand's
element type (f32 against f32 tensors, i64 against i64 ones); shapes and axes are i64.

Every operator is exactly one opset call, made when Python evaluates it, so an expression
writes the same nodes in the same order as the nested opset calls it replaces: the saved IR
(node names are numbered in creation order) and the op forms the plugins fuse stay as they
were. A scalar on the left of an operator becomes a constant only after the right side is
built; where the constant must come first, write it explicitly (`f32(1.0) / x`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Union

import numpy as np
import openvino as ov
from openvino import opset13

Operand = Union["T", ov.Output, ov.Node, float, int, np.ndarray]


class T:
    """One tensor of the graph being built: an `ov.Output` with operators."""

    __slots__ = ("o",)

    def __init__(self, x: T | ov.Output | ov.Node) -> None:
        self.o: ov.Output = x.o if isinstance(x, T) else x.output(0) if isinstance(x, ov.Node) else x

    def lift(self, value: Operand) -> T:
        """`value` as a tensor: a scalar or array becomes a constant of this tensor's element type."""
        if isinstance(value, T | ov.Output | ov.Node):
            return T(value)
        return const(value, self.o.get_element_type().to_dtype())

    @property
    def node(self) -> ov.Node:
        return self.o.get_node()

    def dim(self, axis: int) -> int:
        """The static length of `axis`."""
        return self.o.get_partial_shape()[axis].get_length()

    def _bin(self, fn: Callable[..., ov.Node], other: Operand, reverse: bool = False) -> T:
        other = self.lift(other)
        return T(fn(other.o, self.o) if reverse else fn(self.o, other.o))

    def __add__(self, other: Operand) -> T: return self._bin(opset13.add, other)
    def __radd__(self, other: Operand) -> T: return self._bin(opset13.add, other, True)
    def __sub__(self, other: Operand) -> T: return self._bin(opset13.subtract, other)
    def __rsub__(self, other: Operand) -> T: return self._bin(opset13.subtract, other, True)
    def __mul__(self, other: Operand) -> T: return self._bin(opset13.multiply, other)
    def __rmul__(self, other: Operand) -> T: return self._bin(opset13.multiply, other, True)
    def __truediv__(self, other: Operand) -> T: return self._bin(opset13.divide, other)
    def __rtruediv__(self, other: Operand) -> T: return self._bin(opset13.divide, other, True)
    def __pow__(self, other: Operand) -> T: return self._bin(opset13.power, other)
    def __matmul__(self, other: Operand) -> T: return self._bin(_matmul, other)
    def __neg__(self) -> T: return T(opset13.negative(self.o))
    def __lt__(self, other: Operand) -> T: return self._bin(opset13.less, other)
    def __le__(self, other: Operand) -> T: return self._bin(opset13.less_equal, other)
    def __gt__(self, other: Operand) -> T: return self._bin(opset13.greater, other)
    def __ge__(self, other: Operand) -> T: return self._bin(opset13.greater_equal, other)
    def __and__(self, other: Operand) -> T: return self._bin(opset13.logical_and, other)
    def __or__(self, other: Operand) -> T: return self._bin(opset13.logical_or, other)

    def eq(self, other: Operand) -> T:
        """Elementwise ==; a method, as `__eq__` would make tensors unhashable."""
        return self._bin(opset13.equal, other)

    def matmul_t(self, other: Operand) -> T:
        """self @ otherᵀ (last two axes), as one MatMul with transpose_b."""
        return T(opset13.matmul(self.o, self.lift(other).o, transpose_a=False, transpose_b=True))

    # ------------------------------------------------------------------ elementwise
    def sqrt(self) -> T: return T(opset13.sqrt(self.o))
    def float(self) -> T: return T(opset13.convert(self.o, ov.Type.f32))
    def long(self) -> T: return T(opset13.convert(self.o, ov.Type.i64))

    # ------------------------------------------------------------------ reductions
    def mean(self, axis: int, keepdim: bool = False) -> T:
        return T(opset13.reduce_mean(self.o, i64([axis]).o, keep_dims=keepdim))

    def sum(self, axis: int, keepdim: bool = False) -> T:
        return T(opset13.reduce_sum(self.o, i64([axis]).o, keep_dims=keepdim))

    def max(self, axis: int, keepdim: bool = False) -> T:
        return T(opset13.reduce_max(self.o, i64([axis]).o, keep_dims=keepdim))

    def softmax(self, axis: int) -> T: return T(opset13.softmax(self.o, axis))

    # ------------------------------------------------------------------ shapes
    def reshape(self, *shape: int, special_zero: bool = True) -> T:
        """Reshape; with special_zero a 0 keeps that axis's length."""
        return T(opset13.reshape(self.o, i64(list(shape)).o, special_zero=special_zero))

    def transpose(self, *perm: int) -> T: return T(opset13.transpose(self.o, i64(list(perm)).o))
    def unsqueeze(self, axis: int) -> T: return T(opset13.unsqueeze(self.o, i64([axis]).o))
    def squeeze(self, axis: int) -> T: return T(opset13.squeeze(self.o, i64([axis]).o))

    def slice(self, start: int, stop: int, axis: int, step: int = 1) -> T:
        """self[start:stop:step] along `axis` (stop may be negative, or int64 max for the end)."""
        return T(opset13.slice(self.o, i64([start]).o, i64([stop]).o, i64([step]).o, i64([axis]).o))

    def gather(self, index: Operand, axis: int, batch_dims: int = 0) -> T:
        """Take the entries `index` (a tensor, or ints as an i64 constant) along `axis`."""
        index = index if isinstance(index, T | ov.Output | ov.Node) else i64(index)
        return T(opset13.gather(self.o, T(index).o, i64(axis).o, batch_dims))

    def chunk(self, parts: int, axis: int) -> list[T]:
        """`parts` equal pieces along `axis` (torch.chunk)."""
        return [T(o) for o in opset13.split(self.o, i64(axis).o, parts).outputs()]

    def split(self, sizes: Sequence[int], axis: int) -> list[T]:
        """Pieces of the given lengths along `axis` (torch.split)."""
        return [T(o) for o in opset13.variadic_split(self.o, i64(axis).o, i64(list(sizes)).o).outputs()]

    def batch(self) -> T:
        """The leading dimension as an i64 [1] tensor (for shapes built in the graph)."""
        return T(opset13.shape_of(self.o)).gather([0], 0)


def _matmul(a: ov.Output, b: ov.Output) -> ov.Node:
    return opset13.matmul(a, b, transpose_a=False, transpose_b=False)


def const(values: Any, dtype: type | np.dtype) -> T:
    return T(opset13.constant(np.asarray(values, dtype)))


def f32(values: Any) -> T:
    return const(values, np.float32)


def i64(values: Any) -> T:
    return const(values, np.int64)


def cat(tensors: Sequence[T | ov.Output], axis: int) -> T:
    return T(opset13.concat([T(t).o for t in tensors], axis))


def where(cond: T, a: Operand, b: Operand) -> T:
    """cond ? a : b; a scalar takes the element type of the other branch."""
    like = a if isinstance(a, T) else T(b) if isinstance(b, T | ov.Output | ov.Node) else None
    assert like is not None, "where() needs a tensor branch"
    return T(opset13.select(cond.o, like.lift(a).o, like.lift(b).o))


class _Opset:
    """opset13 taking `T`s (also in lists) and returning a `T`, or a tuple of them for nodes
    with several outputs: the ops a converter uses once or twice, without a method of their own."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = getattr(opset13, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            node = fn(*map(_raw, args), **{k: _raw(v) for k, v in kwargs.items()})
            outputs = node.outputs()
            return T(outputs[0]) if len(outputs) == 1 else tuple(T(o) for o in outputs)
        return call


def _raw(x: Any) -> Any:
    return x.o if isinstance(x, T) else [_raw(v) for v in x] if isinstance(x, list) else x


op = _Opset()


def param(name: str, shape: Sequence[int], dtype: ov.Type) -> T:
    """A graph input with its public tensor name."""
    x = T(opset13.parameter(list(shape), dtype, name=name))
    x.o.get_tensor().set_names({name})
    return x


def result(x: T, name: str) -> ov.Node:
    """A graph output with its public tensor name."""
    node = opset13.result(x.o, name=name)
    node.output(0).get_tensor().set_names({name})
    return node
