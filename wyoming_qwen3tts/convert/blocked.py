"""nncf's 8-bit weight quantiser run over a large matrix a block of rows at a time.

nncf quantises each weight whole: for the 1.24 GB f32 text-embedding table, its quantiser's
intermediates (absolute values, quotients, rounded values: each the table's size) come on top
of the table itself and made the prompt-embedding graph the 0.6B conversion's peak. A per-row
(per-channel) 8-bit quantiser treats every row on its own — its scale is the row's absolute
maximum, each value is divided by its own row's scale — so the rows quantised in blocks and
stacked are the same bytes (docs/OPENVINO.md §16). 4-bit results are left whole: nncf returns
them packed in OpenVINO tensors of a different kind when it sees the whole constant.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

BLOCK_BYTES = 64 * 2**20  # f32 rows per quantiser call: its intermediates stay a few times this

Compress = Callable[..., Any]


def _numpy(tensor: Any) -> np.ndarray:
    return np.asarray(tensor.as_numpy_tensor().data)


def blocked(compress: Compress, block_bytes: int = BLOCK_BYTES) -> Compress:
    """`compress` (nncf's weight_lowering.compress_weight) applied per block of rows where that
    gives the same result: 8-bit integer, one scale per row (reduction over the last axis of a
    2-D weight), no precomputed parameters, larger than a block. Anything else goes whole."""
    from nncf.quantization.algorithms.weight_compression.parameters import CompressedWeight
    from nncf.tensor import Tensor

    def run(weight: Any, reduction_axes: Any, config: Any, precomputed: Any = None) -> Any:
        per_row = (precomputed is None and config.is_integer and config.num_bits == 8 and config.group_size == -1
                   and len(weight.shape) == 2 and tuple(reduction_axes) in ((1,), (-1,)))
        if not per_row:
            return compress(weight, reduction_axes, config, precomputed)
        array = _numpy(weight)  # a view of the constant's memory
        if array.nbytes <= block_bytes:
            return compress(weight, reduction_axes, config, precomputed)
        rows = max(1, block_bytes // (array.shape[1] * array.itemsize))
        quantised: np.ndarray | None = None
        scales: np.ndarray | None = None
        with _one_quantiser_model():
            for lo in range(0, len(array), rows):
                part = compress(Tensor(array[lo:lo + rows]), reduction_axes, config)
                if part.zero_point is not None or part.codebook is not None or part.global_scale is not None:
                    raise RuntimeError("nncf's 8-bit symmetric quantiser returned more than a tensor and a scale")
                q, scale = _numpy(part.tensor), _numpy(part.scale)
                if quantised is None or scales is None:  # filled block by block, never concatenated
                    quantised = np.empty((len(array), *q.shape[1:]), q.dtype)
                    scales = np.empty((len(array), *scale.shape[1:]), scale.dtype)
                # copied now: the reused model's next call overwrites the outputs it shares
                quantised[lo:lo + len(q)], scales[lo:lo + len(q)] = q, scale
        log.debug("quantised a %s weight in blocks of %d rows", weight.shape, rows)
        return CompressedWeight(Tensor(quantised), Tensor(scales))
    return run


@contextmanager
def _one_quantiser_model() -> Iterator[None]:
    """nncf builds an OpenVINO model for each weight it quantises (dynamic shapes; its model cache
    is off while it compresses). Every node built takes the next number of a process-wide counter
    that unnamed nodes are named by, so a model built per block would rename the nodes made after
    it, and the IR would differ. With the cache on for the blocks, the first block builds the one
    model the whole weight would have, and the others reuse it; it is dropped afterwards, so the
    next weight builds its own, as before."""
    from nncf.openvino.optimized_functions.models import OV_MODEL_CACHE as cache

    was_enabled = cache.enabled()
    cache.clear()
    cache.enable()
    try:
        yield
    finally:
        cache.clear()
        if not was_enabled:
            cache.disable()


@contextmanager
def row_blocked_quantiser(block_bytes: int = BLOCK_BYTES) -> Iterator[None]:
    """Within the block, nncf's OpenVINO backend quantises large per-row 8-bit weights in blocks."""
    from nncf.quantization.algorithms.weight_compression import openvino_backend as backend

    original = backend.compress_weight
    backend.compress_weight = blocked(original, block_bytes)
    try:
        yield
    finally:
        backend.compress_weight = original
