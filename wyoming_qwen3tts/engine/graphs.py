"""Load-time changes to converted graphs, made after `read_model` and before compiling.

The IR on disk keeps the form a reader accepts; what depends on the device or on the runner
is done here: the talker becomes paged, the codec chunk graphs get a static batch.
"""
from __future__ import annotations

import openvino as ov
from openvino._offline_transformations import paged_attention_transformation


def to_paged(model: ov.Model, num_layers: int) -> ov.Model:
    """The stateful talker made paged (docs/OPENVINO.md §1: an IR cannot hold
    PagedAttentionExtension, so the pass runs at load, as openvino-genai does); proves it
    worked, since the pass silently does nothing when the stateful pattern is not exact."""
    paged_attention_transformation(model)
    count = sum(o.get_type_name() == "PagedAttentionExtension" for o in model.get_ordered_ops())
    if count != num_layers:
        raise RuntimeError(f"paged_attention_transformation inserted {count} PagedAttention nodes, "
                           f"expected {num_layers}")
    return model


def fix_batch(model: ov.Model, batch: int) -> ov.Model:
    """Reshape a streaming codec graph (in place) to a static batch, to do before compiling
    for the CPU: only with fully static shapes does the plugin fuse SnakeBeta's elementwise
    chain into one kernel (full-size steady chunk of 8, 2 cores: ≈30 against ≈42 ms/frame)."""
    model.reshape({p.get_any_name(): [batch, *(d.get_length() for d in list(p.get_partial_shape())[1:])]
                   for p in model.inputs})
    return model
