"""Prompt layouts of every Qwen3-TTS voice mode: the two input tracks per position.

The talker's input at each prompt position is the sum of a text track
(`text_projection(text_embedding(id))`) and a codec track (a row of `codec_embedding`,
the speaker vector, or the 16-codebook sum of a reference frame). This module decides
*which* ids sit on each track, exactly as the official `generate()` lays them out
(docs/MODEL.md §5); `embed.py` turns a layout into vectors.

    [instruct?] [role: im_start assistant \\n]
    [tts_pad × (Lc-2), tts_bos] + codec prefix minus its final bos
        codec prefix = think think_bos lang think_eos | nothink think_bos think_eos, speaker?, pad, bos
    then the mode tail (non-streaming: all text now; streaming: one text id per frame).

Strings are tokenized whole, as the official wrapper does, and sliced at the same
offsets, so a text whose first characters merge with the role's newline gives the same
ids as upstream.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from .spec import ModelSpec
from .tokenizer import TextTokenizer

log = logging.getLogger(__name__)

NO_TEXT = -1  # text track empty at this position
NO_CODEC = -1  # codec track empty at this position
SPEAKER_SLOT = -2  # codec track carries the request's speaker vector (Base x-vector)
REF_FRAME = -3  # codec track carries the next reference frame's 16-codebook embedding sum


class PromptError(ValueError):
    """A request that cannot be laid out (unknown speaker or language, missing input…)."""


@dataclass(frozen=True)
class VoiceRequest:
    """What to say and how. Which fields apply depends on the model type:
    custom_voice: speaker (+ instruct on 1.7B); voice_design: instruct;
    base: speaker_vector, plus ref_text and ref_codes for in-context cloning (ICL)."""

    text: str
    language: str = "auto"
    speaker: str | None = None
    instruct: str | None = None
    speaker_vector: np.ndarray | None = None
    ref_text: str | None = None
    ref_codes: np.ndarray | None = None  # [R, num_code_groups]
    non_streaming: bool | None = None  # None: the official default of the mode


@dataclass(frozen=True)
class Prompt:
    text_ids: np.ndarray  # [L] int64, NO_TEXT where the text track is empty
    codec_ids: np.ndarray  # [L] int64, NO_CODEC / SPEAKER_SLOT / REF_FRAME or a codec row
    trailing_text_ids: np.ndarray  # [M] text ids fed one per generated frame, then tts_pad
    speaker_vector: np.ndarray | None
    ref_codes: np.ndarray | None
    text_tokens: int = 0  # ids of the text (not counting the role, instruct or reference transcript)
    # leading positions that depend only on the voice and language (instruct, role, codec prefix):
    # the same in every request of a voice, so the runners may keep their KV (prefix cache)
    prefix_len: int = 0

    def __len__(self) -> int:
        return int(self.text_ids.shape[0])


def assistant_text(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"


def assistant_ids(tokenizer: TextTokenizer, text: str) -> tuple[list[int], list[int]]:
    """The role's three ids and the text's ids, as the official generate() slices the whole
    turn (a text starting with a line break merges into the role's newline); the text's ids
    are empty for "" and for a lone "\\n"."""
    ids = tokenizer.encode(assistant_text(text))
    return ids[:3], ids[3:-5]


def ref_text_string(text: str) -> str:
    return f"<|im_start|>assistant\n{text}<|im_end|>\n"


def instruct_text(instruct: str) -> str:
    return f"<|im_start|>user\n{instruct}<|im_end|>\n"


class _Tracks:
    """Accumulates positions of the two tracks."""

    def __init__(self) -> None:
        self.text: list[int] = []
        self.codec: list[int] = []

    def add(self, text: list[int], codec: list[int]) -> None:
        if len(text) != len(codec):
            raise AssertionError("tracks out of step")
        self.text += text
        self.codec += codec


def _language_id(spec: ModelSpec, req: VoiceRequest) -> int | None:
    language = (req.language or "auto").lower()
    if language not in spec.supported_languages:
        raise PromptError(f"unsupported language {req.language!r} (supported: {', '.join(spec.supported_languages)})")
    lang_id = None if language == "auto" else spec.languages[language]
    if req.speaker and spec.model_type == "custom_voice" and language in ("chinese", "auto"):
        dialect = spec.speaker(req.speaker).dialect
        if dialect:  # dialect speakers speak their dialect when the language is Chinese or auto
            lang_id = spec.languages[dialect]
    return lang_id


def _speaker_track(spec: ModelSpec, req: VoiceRequest) -> list[int]:
    """The speaker slot of the codec prefix (empty for VoiceDesign)."""
    if spec.model_type == "custom_voice":
        if not req.speaker:
            known = ", ".join(s.name for s in spec.speakers)
            raise PromptError(f"a custom_voice model needs a speaker (one of: {known})")
        try:
            return [spec.speaker(req.speaker).codec_id]
        except KeyError as e:
            raise PromptError(str(e.args[0])) from None
    if spec.model_type == "voice_design":
        if req.speaker:
            raise PromptError("a voice_design model has no preset speakers; describe the voice with instruct")
        return []
    vec = req.speaker_vector
    if vec is None:
        raise PromptError("a base (voice clone) model needs a speaker vector from reference audio")
    if np.shape(vec) != (spec.talker.stack.hidden_size,):
        raise PromptError(f"speaker vector has shape {np.shape(vec)}, expected ({spec.talker.stack.hidden_size},)")
    return [SPEAKER_SLOT]


def _instruct(spec: ModelSpec, req: VoiceRequest) -> str | None:
    if not req.instruct:
        return None
    if spec.model_type == "base":
        raise PromptError("a base (voice clone) model takes no instruct")
    if spec.model_type == "custom_voice" and spec.model_size == "0b6":
        log.warning("0.6B CustomVoice models ignore instruct (as the official implementation does)")
        return None
    return req.instruct


def build_prompt(spec: ModelSpec, tokenizer: TextTokenizer, req: VoiceRequest) -> Prompt:
    """Lay out the prompt of one request, as the official generate() does: the whole turn is
    tokenized, then sliced (so a text whose start merges with the role's newline gives
    upstream's ids)."""
    role, ids = assistant_ids(tokenizer, req.text)
    prompt = build_open_prompt(spec, tokenizer, req, ids, closed=True, role=role)
    assert prompt is not None  # a closed text always lays out
    return prompt


def build_open_prompt(spec: ModelSpec, tokenizer: TextTokenizer, req: VoiceRequest, text: list[int],
                      closed: bool, role: list[int] | None = None) -> Prompt | None:
    """The prompt of a text that may still be growing (`closed` False: more ids follow, and
    the text's end token is not laid out yet). Ids arriving later extend the trailing text
    only, so the streaming layout can start once the prompt's text positions are known: the
    first id (or, when cloning in context, as many as the reference frames take). Returns
    None while it cannot start yet; a non-streaming layout waits for the whole text.
    Checks the voice first, so a bad request fails before any text arrives. role: the role's
    ids (default: those of an empty text, right for any text that does not start with a line
    break; TextTokenStream.role_ids has them for one that does)."""
    t, c = spec.text_ids, spec.codec_ids
    speaker = _speaker_track(spec, req)  # validates the speaker before the dialect rule looks it up
    lang_id = _language_id(spec, req)
    instruct = _instruct(spec, req)
    icl = spec.model_type == "base" and req.ref_codes is not None
    ref_codes = _ref_codes(spec, req) if icl else None
    ref_frames = 0 if ref_codes is None else len(ref_codes)
    ref_ids = tokenizer.encode(ref_text_string(_ref_text(req)))[3:-2] if icl else []
    non_streaming = req.non_streaming if req.non_streaming is not None else spec.model_type != "base"
    if closed and not text:
        raise PromptError("nothing to say: the text is empty")
    if not closed and (non_streaming or not text or (icl and len(ref_ids) + len(text) < 1 + ref_frames)):
        return None
    prefix = [c.nothink, c.think_bos, c.think_eos] if lang_id is None else [c.think, c.think_bos, lang_id, c.think_eos]
    prefix += speaker + [c.pad, c.bos]
    end = [t.tts_eos] if closed else []

    tracks = _Tracks()
    if instruct is not None:
        instruct_ids = tokenizer.encode(instruct_text(instruct))
        tracks.add(instruct_ids, [NO_CODEC] * len(instruct_ids))
    tracks.add(tokenizer.encode(assistant_text(""))[:3] if role is None else role, [NO_CODEC] * 3)
    tracks.add([t.tts_pad] * (len(prefix) - 2) + [t.tts_bos], prefix[:-1])
    prefix_len = len(tracks.text)  # the next position carries text (or the reference transcript)

    if icl:
        trailing = _icl_tail(spec, ref_ids + text + end, ref_frames, non_streaming, closed, tracks)
    elif non_streaming:
        tracks.add(text + end, [c.pad] * (len(text) + 1))
        tracks.add([t.tts_pad], [c.bos])
        trailing = [t.tts_pad]
    else:
        tracks.add(text[:1], [c.bos])
        trailing = text[1:] + end
    return Prompt(
        text_ids=np.asarray(tracks.text, np.int64),
        codec_ids=np.asarray(tracks.codec, np.int64),
        trailing_text_ids=np.asarray(trailing, np.int64),
        speaker_vector=None if req.speaker_vector is None else np.asarray(req.speaker_vector, np.float32),
        ref_codes=ref_codes,
        text_tokens=len(text),
        prefix_len=prefix_len,
    )


def _ref_codes(spec: ModelSpec, req: VoiceRequest) -> np.ndarray:
    codes = np.asarray(req.ref_codes)
    groups, size = spec.talker.num_code_groups, spec.code_predictor.vocab_size
    if codes.ndim != 2 or codes.shape[1] != groups or codes.shape[0] == 0:
        raise PromptError(f"reference codes have shape {codes.shape}, expected [frames>0, {groups}]")
    if not np.issubdtype(codes.dtype, np.integer) or codes.min() < 0 or codes.max() >= size:
        raise PromptError(f"reference codes must be integers in 0..{size - 1}")
    return codes.astype(np.int64)


def _ref_text(req: VoiceRequest) -> str:
    if not req.ref_text:
        raise PromptError("in-context voice cloning needs the reference audio's transcript (ref_text)")
    return req.ref_text


def _icl_tail(spec: ModelSpec, text_track: list[int], frames: int, non_streaming: bool, closed: bool,
              tracks: _Tracks) -> list[int]:
    """In-context cloning: reference transcript + text (+ end) against codec bos + reference
    frames. An open text covers the codec track already (build_open_prompt waits for that)."""
    t, c = spec.text_ids, spec.codec_ids
    codec_track = [c.bos] + [REF_FRAME] * frames
    if non_streaming:
        tracks.add(text_track, [c.pad] * len(text_track))
        tracks.add([t.tts_pad] * len(codec_track), codec_track)
        return [t.tts_pad]
    if len(text_track) > len(codec_track) or not closed:
        tracks.add(text_track[: len(codec_track)], codec_track)
        return text_track[len(codec_track):]
    tracks.add(text_track + [t.tts_pad] * (len(codec_track) - len(text_track)), codec_track)
    return [t.tts_pad]
