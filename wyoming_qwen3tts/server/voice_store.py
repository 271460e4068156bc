"""Saved voices on disk: `<model.data_dir>/voices/<slug>-<random>/` (docs/HTTP.md, "Saved voices").

A folder holds voice.json (name, description, language, and a clone's transcript, a
designed voice's instruct, or a styled voice's speaker and instruct) and, for a clone,
clip.wav (24 kHz s16 mono). The folder name is
a slug of the voice's name plus random hex, so no name can reach outside voices/ or another
voice's files. Writes are atomic: a voice is assembled in `.partial-<random>/` and renamed
into place (a crash leaves only a partial folder, swept at the next start); voice.json is
replaced through a temporary file; a deleted voice is first renamed to `.trash-<random>`.
The store only keeps files: which names are free is the voice lab's question.
"""
from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import time
import unicodedata
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..config import VoiceConfig
from ..engine.audio import SAMPLE_RATE, write_wav
from .api_error import ApiError

log = logging.getLogger(__name__)

VOICE_FILE, CLIP_FILE = "voice.json", "clip.wav"
PARTIAL, TRASH = ".partial-", ".trash-"
MAX_VOICES = 100
MAX_NAME_CHARS = 40
MAX_DESCRIPTION_CHARS = 200
MAX_TRANSCRIPT_CHARS = 1000
MAX_INSTRUCT_CHARS = 500
MAX_VOICE_FILE_BYTES = 64 * 1024
# Letters (any script), digits, and space . _ ' - inside; no slash, no control character.
NAME = re.compile(r"[^\W_](?:[\w .'-]*[\w.'])?")


def check_name(name: str) -> str:
    """A voice name as given, or ApiError 422 saying what is wrong with it."""
    if not name:
        raise ApiError(422, "give the voice a name")
    if len(name) > MAX_NAME_CHARS:
        raise ApiError(422, f"a name has at most {MAX_NAME_CHARS} characters")
    if NAME.fullmatch(name) is None:
        raise ApiError(422, "a name starts with a letter or digit and holds only letters, digits, spaces "
                            "and . _ ' -")
    return name


def check_text(field: str, value: str, limit: int) -> str:
    if len(value) > limit:
        raise ApiError(422, f"the {field} has at most {limit} characters")
    if any(unicodedata.category(c) == "Cc" and c not in "\n\t" for c in value):
        raise ApiError(422, f"the {field} holds control characters")
    return value


# What a save takes in each text field of voice.json; a file edited by hand is read with the same
# bounds, so a number, a list or an oversized text is not served (and reaches no catalogue).
# None: text, checked by the catalogue against the model's speakers or languages (as a save is).
FIELD_LIMITS = {"description": MAX_DESCRIPTION_CHARS, "transcript": MAX_TRANSCRIPT_CHARS,
                "instruct": MAX_INSTRUCT_CHARS, "language": None, "speaker": None}


def _field(data: dict[str, Any], key: str) -> str | None:
    """voice.json's `key`: None, or text within FIELD_LIMITS[key] and without control characters
    (ValueError, as ApiError is one, otherwise)."""
    value, limit = data.get(key), FIELD_LIMITS[key]
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"the {key} is not text")
    return value if limit is None else check_text(key, value, limit)


def slug(name: str) -> str:
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")[:24] or "voice"


@dataclass(frozen=True)
class SavedVoice:
    """One saved voice: a clone (clip.wav, transcript or none), a designed one (instruct), or a
    styled preset speaker (speaker and instruct, a 1.7B CustomVoice model)."""

    name: str
    description: str
    language: str | None
    transcript: str | None = None  # a clone's; None: a timbre-only clone (the speaker vector alone)
    instruct: str | None = None  # a designed voice's description, or a styled speaker's style
    speaker: str | None = None  # a styled voice's preset speaker (the model's name for it)
    created: float = 0.0
    folder: Path = Path()

    @property
    def kind(self) -> str:
        """clone, designed or styled."""
        if self.speaker is not None:
            return "styled"
        return "designed" if self.instruct is not None else "clone"

    def config(self) -> VoiceConfig:
        """The voice as the catalogue takes it."""
        if self.kind != "clone":
            return VoiceConfig(self.name, self.description, self.language, speaker=self.speaker,
                               instruct=self.instruct)
        return VoiceConfig(self.name, self.description, self.language, ref_audio=str(self.folder / CLIP_FILE),
                           ref_text=self.transcript, x_vector_only=self.transcript is None)

    def _json(self) -> bytes:
        data = {k: v for k, v in asdict(self).items() if k != "folder"}
        return json.dumps(data, ensure_ascii=False, indent=1).encode()


class VoiceStore:
    """The voices/ folder: load, add, update, remove. Not thread-safe: the voice lab serialises
    its changes."""

    def __init__(self, root: Path, cap: int = MAX_VOICES) -> None:
        self.root, self.cap = root, cap

    def load(self) -> list[SavedVoice]:
        """Every saved voice, oldest first, after sweeping what a crash left (partial or trashed
        folders); a folder that cannot be read is logged and left alone."""
        if not self.root.is_dir():
            return []
        voices = []
        for folder in sorted(self.root.iterdir()):
            if folder.name.startswith((PARTIAL, TRASH)):
                log.info("removing %s (left by an interrupted save or delete)", folder)
                shutil.rmtree(folder, ignore_errors=True)
                continue
            if not folder.is_dir() or folder.name.startswith("."):
                continue
            try:
                voices.append(self._read(folder))
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.error("saved voice %s cannot be read (%s); it is not served", folder, e)
        return sorted(voices, key=lambda v: v.created)

    def _read(self, folder: Path) -> SavedVoice:
        with open(folder / VOICE_FILE, "rb") as f:
            raw = f.read(MAX_VOICE_FILE_BYTES + 1)
        if len(raw) > MAX_VOICE_FILE_BYTES:
            raise ValueError(f"{VOICE_FILE} is too large")
        data = json.loads(raw)
        voice = SavedVoice(name=check_name(data["name"]), description=_field(data, "description") or "",
                           language=_field(data, "language"), transcript=_field(data, "transcript"),
                           instruct=_field(data, "instruct"), speaker=_field(data, "speaker"),
                           created=float(data.get("created", 0.0)), folder=folder)
        if voice.kind == "styled" and not voice.speaker:
            raise ValueError("a styled voice without its speaker")
        if voice.kind != "clone" and not voice.instruct:
            raise ValueError(f"a {voice.kind} voice without its instruct")
        if voice.kind == "clone" and not (folder / CLIP_FILE).is_file():
            raise ValueError(f"{CLIP_FILE} is missing")
        return voice

    def add(self, voice: SavedVoice, clip: np.ndarray | None, count: int) -> SavedVoice:
        """Write a new voice (count: saved voices now, for the cap); atomic."""
        if count >= self.cap:
            raise ApiError(409, f"{self.cap} voices are saved already; delete one first")
        token = secrets.token_hex(4)
        partial = self.root / f"{PARTIAL}{token}"
        final = self.root / f"{slug(voice.name)}-{token}"
        voice = replace(voice, created=time.time(), folder=final)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            partial.mkdir()
            if clip is not None:
                write_wav(partial / CLIP_FILE, clip, SAMPLE_RATE)
            _write_synced(partial / VOICE_FILE, voice._json())
            os.rename(partial, final)
        except OSError as e:
            shutil.rmtree(partial, ignore_errors=True)
            raise ApiError(507, f"cannot save the voice: {e.strerror or e}") from None
        return voice

    def update(self, voice: SavedVoice) -> None:
        """Replace a voice's voice.json (a rename, a new description or language); atomic."""
        tmp = voice.folder / f".{VOICE_FILE}.{secrets.token_hex(4)}.tmp"
        try:
            _write_synced(tmp, voice._json())
            os.replace(tmp, voice.folder / VOICE_FILE)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise ApiError(507, f"cannot update the voice: {e.strerror or e}") from None

    def remove(self, voice: SavedVoice) -> None:
        """Delete a voice's folder: renamed away first, so it is gone at once even if the removal
        of its files is interrupted."""
        trash = self.root / f"{TRASH}{secrets.token_hex(4)}"
        try:
            os.rename(voice.folder, trash)
        except OSError as e:
            raise ApiError(507, f"cannot delete the voice: {e.strerror or e}") from None
        shutil.rmtree(trash, ignore_errors=True)


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
