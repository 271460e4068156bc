"""The start of a stream's first frame, decoded ahead of the rest (docs/MODEL.md §8.3).

The codec is causal down to the sample, so the first half of a frame's audio needs only the
first half of the work of its four upsampling blocks. Where the conversion has that graph
(`codec_lead_2`, format 5), the batch decodes a new stream's first 40 ms with it and hands it
out at once; the frame is then decoded whole by the stream's chunk graph, which carries the
decoder state on, and its first 960 samples are dropped. First audio then waits for about half
of a 1-frame codec call instead of all of it (~8 against ~15 ms, 0.6B, bf16), at the cost of
one more compiled decoder (its weights packed again) and that much extra work per request.

The lead's samples are the frame's own (exact in f32; in bf16 both calls round their way, so
the seam between them differs by that rounding). It is used only when the rest of the frame
will come before the lead has played (Pacer.lead_keeps_up).
"""
from __future__ import annotations

import logging
import threading
import time

import numpy as np

from ..model.manifest import LEAD_GRAPH
from .graphs import MappedIr, fix_batch
from .loaded_model import LoadedModel

log = logging.getLogger(__name__)


class CodecLead:
    """The lead graph compiled where the decoder runs (static batch 1), warmed up. Models
    with the same codec share one (engine/decoders.py): each thread calling it has an infer
    request of its own (one request is for one thread at a time)."""

    def __init__(self, model: LoadedModel) -> None:
        device = model.devices["decoder"]
        # Its weights are read over a mapping of our own: the compiled graph keeps the model's
        # constants (the codebook table is read in place), and with it the whole mapped file,
        # all of whose pages compiling has read (0.6B: 355 MB resident for nothing).
        self._ir = MappedIr(model.core, model.dir / f"{LEAD_GRAPH}.xml")
        self._compiled = model.core.compile_model(fix_batch(self._ir.model, 1), device, model.properties("decoder"))
        self._requests = threading.local()
        self.samples = int(self._compiled.output("pcm").get_shape()[1])
        self._groups = int(self._compiled.input("codes").get_shape()[1])
        start = time.perf_counter()
        self(np.zeros(self._groups, np.int64))  # a compiled graph's first call packs its weights
        self._ir.release()  # packed now: only the rows the codebook lookups read come back
        log.info("codec lead: the first %d samples of a stream's first frame ahead of the rest (%s; warm-up %.0f ms)",
                 self.samples, device, (time.perf_counter() - start) * 1e3)

    @staticmethod
    def available(model: LoadedModel) -> bool:
        return LEAD_GRAPH in model.manifest["graphs"] and (model.dir / f"{LEAD_GRAPH}.xml").is_file()

    def __call__(self, codes: np.ndarray) -> np.ndarray:
        """PCM [samples] of a stream's first frame, codes [16]."""
        request = getattr(self._requests, "request", None)
        if request is None:
            request = self._requests.request = self._compiled.create_infer_request()
        out = request.infer({"codes": np.asarray(codes, np.int64).reshape(1, self._groups, 1)})
        return out["pcm"][0].copy()
