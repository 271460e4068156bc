"""A converted model directory, loaded: spec, tokenizer, devices and precisions, the prompt
embedding graph. The runners compile the talker, subcode and codec graphs themselves."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import openvino as ov

from ..model.embed import PromptEmbeds
from ..model.manifest import read_converted
from ..model.prompt import REF_FRAME, SPEAKER_SLOT, Prompt, PromptError, VoiceRequest, build_prompt
from ..model.stream_io import FRAMES
from ..model.tokenizer import TextTokenizer
from .devices import check_kv_cache, compile_config, dynamic_device, resolve_precision, resolve_precisions, static_batch
from .graphs import MappedIr

log = logging.getLogger(__name__)


class LoadedModel:
    """One converted directory for either runner: spec, tokenizer, devices and precisions,
    the embedding graph (and the offline decoder, compiled on first use)."""

    def __init__(self, model_dir: str | Path, device: str = "CPU", precision: str = "f32",
                 kv_precision: str = "u8", threads: int | None = None, subcode_device: str | None = None,
                 decoder_device: str | None = None, cache_dir: str | Path | None = None) -> None:
        """threads: inference threads per graph (None: all cores). With one thread a
        sequence's numbers do not depend on what else is in its batch; with several, the CPU
        plugin's paged attention sums partial results per thread in an order that follows
        the batch (last-bit differences). device: of the embedding and talker graphs;
        subcode_device and decoder_device (codec) default to it. cache_dir: OpenVINO's
        compiled-blob cache (a second start compiles fast). The offline decoder is compiled
        on first use."""
        self.dir = Path(model_dir)
        self.manifest, self.spec = read_converted(self.dir, graphs=("embed", "talker", "subcode", "codec"))
        self.tokenizer = TextTokenizer.from_dir(self.dir)
        self.precision, self.kv_precision = precision, kv_precision
        self.devices = {"talker": device, "subcode": subcode_device or device, "decoder": decoder_device or device}
        self.threads, self.cache_dir = threads, cache_dir
        self.decoder_batch = static_batch(self.devices["decoder"])
        core = ov.Core()
        self.precisions = resolve_precisions(core, precision, self.devices)  # what each graph runs, per device
        check_kv_cache(self.precisions["talker"], kv_precision, self.devices["talker"])  # before anything compiles
        # The text table (0.6B: 311 MB) is read in place, a row per id: over our own mapping,
        # its pages released after each call, since every row read keeps ~64 KB of the file
        # resident (the kernel maps the pages around a fault): over varied text, all of it.
        self._embed_ir = MappedIr(core, self.dir / "embed.xml")
        self._text_table = self._embed_ir.largest_constant()  # only its pages: the rest is read every call
        self.embed = core.compile_model(self._embed_ir.model, device, self.properties("talker"))
        self.core = core
        self._offline: ov.CompiledModel | None = None  # compiled on first use
        self._embed_req = self.embed.create_infer_request()
        self.tts_pad = self._embed(np.array([self.spec.text_ids.tts_pad]), np.array([-1]))[0][0]
        log.info("loaded %s: %s (precision %s, KV %s)", self.dir,
                 ", ".join(f"{g} {self.devices[g]} {p}" for g, p in self.precisions.items()), precision, kv_precision)
        if (precision == "auto" and self.devices["decoder"] == "CPU" and self.precisions["decoder"] == "f32"
                and self.manifest["options"]["codec_weights"] != "int8"):
            log.info("the codec decoder runs f32 on this %s (no native BF16): a third of a frame's time at 1.7B; "
                     "model.codec_weights: int8 (--codec-weights int8) makes it about twice as fast, not exact "
                     "(docs/BENCHMARKS.md, \"The decoder in INT8\")", self.devices["decoder"])

    def exported_chunks(self, kind: str) -> dict[int, Path]:
        """Codec chunk graphs in the directory: size -> IR path, for kind first or steady."""
        return {int(p.stem.rsplit("_", 1)[1]): p for p in sorted(self.dir.glob(f"codec_{kind}_*.xml"))}

    def codec_graphs(self, chunks: Sequence[int]) -> dict[str, dict[int, Path]]:
        """The exported codec graphs to compile for a schedule's (first, steady) chunk sizes:
        kind (first, steady) -> size -> IR path. A steady graph that takes the real frame
        count decodes every chunk up to its length exactly (a short last chunk, a reference's
        priming), so the shortest one that covers the longest chunk is the only steady graph
        compiled: every compiled graph packs every decoder weight again. The first chunk keeps
        a graph of its own length when the conversion has one and it is shorter: through the
        steady graph it would cost all n frames' decoding before the first audio (0.6B, bf16:
        one more decoder copy, ~0.3 GB, buys ~3x less time in the first codec call; a schedule
        whose first chunk is the steady one compiles one graph). That graph is a steady one
        where the conversion has it (format 3): it also decodes a paced stream's short chunks
        (engine/pacing.py); an older conversion's first-chunk graph starts streams only.
        Steady graphs without the frame count (older conversions) need a graph per chunk size,
        and a Base model its 1-frame graph, with which a reference of any length primes the
        codec exactly."""
        exported = {kind: self.exported_chunks(kind) for kind in ("first", "steady")}
        first = chunks[0]
        any_length = self.any_length_chunks()
        for n in any_length:
            if n >= max(chunks):
                steady = {n: exported["steady"][n]}
                if first < n and first in any_length:
                    return {"first": {}, "steady": {first: exported["steady"][first], **steady}}
                early = {first: exported["first"][first]} if first < n and first in exported["first"] else {}
                return {"first": early, "steady": steady}
        wanted = set(chunks) | ({1} if self.spec.model_type == "base" else set())
        return {kind: {n: p for n, p in graphs.items() if n in wanted} for kind, graphs in exported.items()}

    def any_length_chunks(self) -> list[int]:
        """Lengths of the exported steady graphs that take the real frame count (every chunk
        up to their length, the state carried on exactly), ascending."""
        return [n for n in sorted(self.exported_chunks("steady")) if any(
            port["name"] == FRAMES for port in self.manifest["graphs"].get(f"codec_steady_{n}", {}).get("inputs", ()))]

    def properties(self, graph: str, kv_precision: str | None = None) -> dict:
        """Compile properties of `graph` on its device, in its precision (devices.compile_config)."""
        return compile_config(self.precisions[graph], kv_precision, self.threads, self.devices[graph], self.cache_dir)

    def _embed(self, text_ids: np.ndarray, codec_ids: np.ndarray,
               frames: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(track sums [N, H], reference-frame sums [R, H]) from the embedding graph."""
        frames = np.zeros((0, self.spec.talker.num_code_groups), np.int64) if frames is None else frames
        out = self._embed_req.infer({"text_ids": text_ids.astype(np.int64), "codec_ids": codec_ids.astype(np.int64),
                                     "frame_codes": frames.astype(np.int64)})
        embeds, frame_embeds = out["embeds"].copy(), out["frame_embeds"].copy()
        self._embed_ir.release(*self._text_table)
        return embeds, frame_embeds

    def decode_offline(self, codes: np.ndarray, prefix: np.ndarray | None = None) -> np.ndarray:
        """PCM of a whole utterance's codes [T, 16] in one call of the offline decoder; with
        reference codes `prefix` [R, 16] (in-context cloning) decoded in front and their
        audio cut off, as the official implementation does."""
        if codes.shape[0] == 0:
            return np.zeros(0, np.float32)
        if prefix is not None:
            pcm = self.decode_offline(np.concatenate([prefix, codes]))
            return pcm[prefix.shape[0] * self.spec.codec_decoder.samples_per_frame:]
        if self._offline is None:
            self._offline = self.compile_dynamic("codec")
        return self._offline({"codes": codes.T[None].astype(np.int64)})["pcm"][0].copy()

    def compile_dynamic(self, graph: str, precision: str | None = None) -> ov.CompiledModel:
        """A graph with dynamic lengths (the offline decoder, the clone encoders) on the
        decoder's device, or on the CPU where that device needs static shapes; in the
        model's precision setting resolved for that device unless one is given."""
        device = dynamic_device(self.devices["decoder"])
        precision = precision or resolve_precision(self.core, self.precision, device)
        config = compile_config(precision, None, self.threads, device, self.cache_dir)
        return self.core.compile_model(self.core.read_model(self.dir / f"{graph}.xml"), device, config)

    def prompt(self, req: VoiceRequest) -> Prompt:
        return build_prompt(self.spec, self.tokenizer, req)

    def embed_text(self, ids: Sequence[int]) -> np.ndarray:
        """Trailing-text rows [n, H] of text ids (an open request's text as it arrives)."""
        if not ids:
            return np.zeros((0, self.spec.talker.stack.hidden_size), np.float32)
        return self._embed(np.asarray(ids, np.int64), np.full(len(ids), -1))[0]

    def embed_prompt(self, prompt: Prompt) -> PromptEmbeds:
        """Both tracks through the embedding graph; speaker vectors and reference frames added here."""
        codec = prompt.codec_ids
        base = np.where(codec >= 0, codec, -1)
        trailing_ids = prompt.trailing_text_ids
        # one call for both (each costs ~1 ms beyond its rows on a CPU: first audio waits for it)
        rows, frames = self._embed(np.concatenate([prompt.text_ids, trailing_ids]),
                                   np.concatenate([base, np.full(len(trailing_ids), -1)]), prompt.ref_codes)
        prefill, trailing = rows[:len(codec)], rows[len(codec):]
        if prompt.ref_codes is not None:
            prefill[codec == REF_FRAME] += frames
        if (codec == SPEAKER_SLOT).any():
            if prompt.speaker_vector is None:
                raise PromptError("the prompt has a speaker slot but no speaker vector")
            prefill[codec == SPEAKER_SLOT] += prompt.speaker_vector
        return PromptEmbeds(prefill=prefill, trailing=trailing, codec_prefix=prompt.ref_codes)
