"""One utterance being generated: what is cached, what the next talker call feeds, the codes so
far and the PCM not yet taken. The batch (engine/batch.py) moves it on; runners never see it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model.embed import PromptEmbeds
from .sampling import SamplingParams
from .step import GROUPS


class Draws:
    """A request's uniform draws, [frames, 16]: per frame one for group 0 and 15 for the
    subcode, in the order a per-request generator yields them (so a seed reproduces a request
    in any batch, with either runner, and a frame cap that grows with an open text continues
    the same sequence)."""

    def __init__(self, seed: int | None) -> None:
        self._rng = np.random.default_rng(seed)

    def next(self, frames: int) -> np.ndarray:
        return self._rng.random((max(0, frames), GROUPS))


@dataclass(eq=False)  # identity: two sequences are never equal
class Sequence:
    """One utterance being generated."""

    id: int
    embeds: PromptEmbeds
    params: SamplingParams
    max_frames: int
    draws: Draws  # the request's generator: more uniforms when the frame cap grows
    text_open: bool = False  # more trailing text will come (Batch.extend); until then no pad is fed
    paced: bool = False  # its audio is played as it arrives: short codec chunks while barely ahead (pacing.py)
    cached: int = 0  # tokens already in the KV cache
    pending: np.ndarray | None = None  # embeddings the next talker call feeds
    held: np.ndarray | None = None  # [H] the last frame's embedding, waiting for its trailing-text row
    prefix_tokens: int = 0  # leading prompt positions whose KV the prefix cache shares (0: none)
    prefix_key: bytes | None = None  # set until this sequence has pinned its prefix (it was not cached)
    num_frames: int = 0
    decoded: int = 0  # frames handed to the codec
    first_audio_at: float | None = None  # time.perf_counter() when its first chunk was decoded
    led: int = 0  # samples of its first frame already out by the codec lead (engine/codec_lead.py)
    finished: bool = False
    reason: str = ""  # "eos", "length" or an error
    trailing: np.ndarray = field(init=False)  # [M, H] text rows fed with the frames; grows while text_open
    uniforms: np.ndarray = field(init=False)  # [max_frames, 16] the request's draws
    audio: list[np.ndarray] = field(default_factory=list)  # PCM chunks not yet taken, in order
    _codes: np.ndarray = field(init=False, repr=False)  # [max_frames, 16]

    def __post_init__(self) -> None:
        self.pending = self.embeds.prefill
        self.trailing = self.embeds.trailing
        self.uniforms = self.draws.next(self.max_frames)
        self._codes = np.zeros((self.max_frames, GROUPS), np.int64)

    @property
    def prompt_tokens(self) -> int:
        return self.embeds.prefill.shape[0]

    @property
    def rows(self) -> np.ndarray:
        """The pending input, for a sequence the next talker call feeds (it has some)."""
        if self.pending is None:
            raise RuntimeError(f"sequence {self.id} has no pending input")
        return self.pending

    @property
    def codes(self) -> np.ndarray:
        """[frames, 16] the codes generated so far."""
        return self._codes[:self.num_frames].copy()

    @property
    def history(self) -> np.ndarray:
        """The group-0 codes so far (a view)."""
        return self._codes[:self.num_frames, 0]

    @property
    def pcm(self) -> np.ndarray:
        return np.concatenate(self.audio) if self.audio else np.zeros(0, np.float32)

    def take_audio(self) -> list[np.ndarray]:
        """PCM chunks decoded since the last call, in order."""
        chunks, self.audio = self.audio, []
        return chunks

    def grow(self, frames: int) -> None:
        """Raise the frame cap to `frames`, continuing the request's draws."""
        added = frames - self.max_frames
        if added > 0:
            self.uniforms = np.concatenate([self.uniforms, self.draws.next(added)])
            self._codes = np.concatenate([self._codes, np.zeros((added, GROUPS), np.int64)])
            self.max_frames = frames

    def add_frame(self, codes: np.ndarray) -> None:
        self._codes[self.num_frames] = codes
        self.num_frames += 1

    def chunk(self, size: int) -> np.ndarray:
        """The next `size` frames' codes from the first not yet decoded (fewer at the end)."""
        return self._codes[self.decoded:min(self.decoded + size, self.num_frames)]

    def feed_frame(self, frame: np.ndarray, pad: np.ndarray) -> None:
        """The talker's next input: the frame's embedding plus trailing text row t (t = the
        frame's index), or the pad once the text has run out; held while an open text has
        no row t yet (feeding a pad would tell the model the text is over)."""
        t = self.num_frames - 1
        if t < self.trailing.shape[0]:
            self.pending, self.held = (frame + self.trailing[t])[None, :], None
        elif self.text_open:
            self.pending, self.held = None, frame
        else:
            self.pending, self.held = (frame + pad)[None, :], None
