"""Voice cloning with a Base model: a reference recording -> speaker vector + reference codes.

The official `create_voice_clone_prompt` resamples the recording to 24 kHz, encodes it
into codes [R, 16] with the codec encoder (in-context cloning continues from them) and
takes the speaker vector (x-vector) from the ECAPA-TDNN speaker encoder over its log-mel
spectrogram. Both run once per recording: the result is cached on disk, keyed by the
SHA-256 of the file's bytes, in the converted model's directory (a new conversion starts
a new cache; a changed recording gets a new key).
"""
from __future__ import annotations

import hashlib
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..engine.audio import SAMPLE_RATE
from ..engine.loaded_model import LoadedModel
from ..model.mel import log_mel
from ..model.prompt import VoiceRequest
from .reference_audio import AudioError, decode_wav, read_file, resample

log = logging.getLogger(__name__)

MIN_SECONDS = 1.0  # shorter references carry too little of a voice
MAX_SECONDS = 30.0  # the reference's codes join every prompt (12.5 positions per second)
SILENCE_RMS = 1e-4  # a reference quieter than this (about -80 dBFS) holds no voice
CACHE_DIR = "clones"  # in the converted model's directory
CACHE_VERSION = 1  # bump when what is cached, or how it is computed, changes


class CloneError(ValueError):
    """A voice that cannot be cloned; the message names the voice and says why."""


@dataclass(frozen=True, eq=False)  # arrays: compared by identity
class Reference:
    """What the encoders make of one recording."""

    speaker_vector: np.ndarray  # [H] float32
    codes: np.ndarray  # [R, 16] int64


@dataclass(frozen=True, eq=False)  # arrays: compared (and hashed) by identity
class ClonePrompt:
    """A cloned voice, ready for requests: in-context (ref_codes and ref_text) or from
    the speaker vector alone (x-vector only)."""

    speaker_vector: np.ndarray
    ref_codes: np.ndarray | None
    ref_text: str | None

    def request(self, text: str, language: str = "auto") -> VoiceRequest:
        return VoiceRequest(text, language, speaker_vector=self.speaker_vector, ref_text=self.ref_text,
                            ref_codes=self.ref_codes)


class Cloner:
    """Runs a Base model's clone encoders (compiled on first use, released by close()) and
    keeps their results. The encoders always compute in f32, whatever the engine's
    precision: a nearest-codebook search is where reduced precision changes codes."""

    def __init__(self, model: LoadedModel, cache_dir: str | Path | None = None, use_cache: bool = True) -> None:
        if model.spec.model_type != "base":
            raise CloneError(f"voice cloning needs a Base model; {model.dir} is {model.spec.model_type}")
        self.model = model
        self.cache_dir = (Path(cache_dir) if cache_dir is not None else model.dir / CACHE_DIR) if use_cache else None
        self._graphs: dict[str, object] = {}

    def close(self) -> None:
        """Release the compiled encoders (a server needs them only while it starts)."""
        self._graphs.clear()

    def _infer(self, graph: str, inputs: dict[str, np.ndarray], output: str) -> np.ndarray:
        if graph not in self._graphs:
            self._graphs[graph] = self.model.compile_dynamic(graph, precision="f32").create_infer_request()
        return self._graphs[graph].infer(inputs)[output][0].copy()  # type: ignore[attr-defined]

    def encode(self, audio: np.ndarray, sample_rate: int, where: str = "reference") -> Reference:
        """Speaker vector and codes of a mono recording at any sample rate."""
        audio = np.asarray(audio, np.float32)
        seconds = audio.shape[0] / sample_rate
        if not MIN_SECONDS <= seconds <= MAX_SECONDS:
            raise CloneError(f"{where} is {seconds:.1f} s long; use {MIN_SECONDS:g}–{MAX_SECONDS:g} s "
                             f"(3–10 s of clear speech work best)")
        if float(np.sqrt(np.mean(np.square(audio, dtype=np.float64)))) < SILENCE_RMS:
            raise CloneError(f"{where} is silent")
        wav = resample(audio, sample_rate, SAMPLE_RATE)
        start = time.perf_counter()
        codes = self._infer("codec_encoder", {"pcm": wav[None]}, "codes").T.astype(np.int64)
        vector = self._infer("speaker_encoder", {"mels": log_mel(wav)[None]}, "xvector").astype(np.float32)
        log.info("%s: %.1f s at %d Hz -> %d reference frames and a speaker vector in %.2f s", where, seconds,
                 sample_rate, codes.shape[0], time.perf_counter() - start)
        return Reference(vector, codes)

    def reference(self, path: str | Path, where: str | None = None) -> Reference:
        """The encoders' result for a WAV file, from the cache when the file is unchanged."""
        where = where or str(path)
        try:
            data = read_file(path)
            key = hashlib.sha256(data).hexdigest()
            cached = self._read_cache(key)
            if cached is not None:
                log.info("%s: clone features from the cache (%s)", where, key[:12])
                return cached
            ref = self.encode(*decode_wav(data, str(path), MAX_SECONDS), where=where)
        except AudioError as e:
            raise CloneError(f"{where}: {e}") from None
        self._write_cache(key, ref)
        return ref

    def prompt(self, path: str | Path, ref_text: str | None = None, x_vector_only: bool = False,
               where: str | None = None) -> ClonePrompt:
        """A cloned voice from a recording and its transcript (or the speaker vector only)."""
        where = where or str(path)
        if not x_vector_only and not (ref_text or "").strip():
            raise CloneError(f"{where}: in-context cloning needs the recording's transcript (ref_text); "
                             f"or clone from the speaker vector alone (x_vector_only)")
        ref = self.reference(path, where)
        if x_vector_only:
            return ClonePrompt(ref.speaker_vector, None, None)
        return ClonePrompt(ref.speaker_vector, ref.codes, ref_text)

    # -------------------------------------------------------------------------------- cache

    def _cache_file(self, key: str) -> Path | None:
        return None if self.cache_dir is None else self.cache_dir / f"{key}.npz"

    def _read_cache(self, key: str) -> Reference | None:
        path = self._cache_file(key)
        if path is None or not path.is_file():
            return None
        hidden, groups = self.model.spec.talker.stack.hidden_size, self.model.spec.talker.num_code_groups
        try:
            with np.load(path) as f:
                version, vector, codes = int(f["version"]), f["speaker_vector"], f["codes"]
        except Exception as e:
            log.warning("%s: unreadable clone cache entry (%s: %s); encoding again", path, type(e).__name__, e)
            return None
        if version != CACHE_VERSION or vector.shape != (hidden,) or codes.ndim != 2 or codes.shape[1] != groups:
            log.warning("%s: clone cache entry of another version or model; encoding again", path)
            return None
        return Reference(vector.astype(np.float32), codes.astype(np.int64))

    def _write_cache(self, key: str, ref: Reference) -> None:
        path = self._cache_file(key)
        if path is None:
            return
        tmp = path.with_name(f"{path.stem}.{secrets.token_hex(4)}.tmp.npz")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                np.savez(f, version=np.int64(CACHE_VERSION), speaker_vector=ref.speaker_vector, codes=ref.codes)
                f.flush()
                os.fsync(f.fileno())  # on disk before the rename: a power cut leaves no empty entry
            os.replace(tmp, path)  # readers see the old entry or the whole new one
        except OSError as e:
            log.warning("cannot cache clone features in %s (%s); they will be computed again next start",
                        path.parent, e.strerror or e)
            tmp.unlink(missing_ok=True)
