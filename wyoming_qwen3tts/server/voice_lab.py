"""The voice lab: every operation of the HTTP side that reads or changes the voice catalogue
(docs/HTTP.md), in one class, over the one loaded model of a ServiceSlot.

A Base model clones voices from recordings (clone/cloner.py), a VoiceDesign model designs
them from a description; saved ones live in the VoiceStore and join the catalogue after
the configured voices, so they are in Wyoming `describe` at once and at every start. The
clone encoders run on a worker thread (Wyoming keeps serving meanwhile); a clone's features
are cached in its own folder (Cloner.cache_dir), so they are saved, backed up and deleted
with it. Changes are serialised; names being saved are reserved, so of two saves of one
name the second gets 409 at once.

Surface (what a multi-model server re-points): prepare_catalogue() and attach() at start,
abilities(), voices(), decode(), save(), rename(), delete(), preview().
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import __version__
from ..clone.cloner import CloneError, ClonePrompt, Cloner
from ..config import ServerConfig, VoiceConfig
from .api_error import ApiError
from .http_forms import VoiceForm
from .loading import prepare_clone
from .service import Service, ServiceSlot
from .upload import Clip, decode_upload
from .voice_store import (
    MAX_DESCRIPTION_CHARS,
    MAX_INSTRUCT_CHARS,
    MAX_TRANSCRIPT_CHARS,
    SavedVoice,
    VoiceStore,
    check_name,
    check_text,
)
from .voices import Catalogue, CatalogueError, VoiceEntry, build_info, model_language

log = logging.getLogger(__name__)

PREVIEW_NAME = "(preview)"


class VoiceLab:
    """Saved voices over the slot's model. Built before the model loads; `attach` adds the
    saved voices to the loaded service."""

    def __init__(self, slot: ServiceSlot, config: ServerConfig, on_change: Callable[[], None] | None = None) -> None:
        """on_change: called after the voice list changed (Home Assistant's refresh)."""
        self.slot, self.config, self.on_change = slot, config, on_change
        self.store = VoiceStore(config.model.data_path / "voices")
        self.saved: list[SavedVoice] = []
        self._prompts: dict[str, ClonePrompt] = {}  # by recording path
        self._cloner: Cloner | None = None
        self._encoding = threading.Lock()  # one user of the encoders at a time
        self._changing = asyncio.Lock()
        self._reserved: set[str] = set()  # casefolded names being saved

    # ------------------------------------------------------------------ start (loading thread)

    def prepare_catalogue(self, catalogue: Catalogue | None) -> Catalogue | None:
        """The preview catalogue (before the model loads) with the saved voices; reads the store."""
        self.saved = self.store.load()
        if catalogue is None or not self.saved:
            return catalogue
        return self._catalogue(catalogue.spec, None, preview=True)

    def attach(self, service: Service) -> Service:
        """The loaded service with the saved voices in its catalogue (their recordings through
        the encoders, or from their folder's cache). Runs on the loading thread."""
        for voice in self.config.voices:  # already prepared by build_service: reused, not encoded again
            if voice.ref_audio is not None:
                entry = next((e for e in service.catalogue.voices if e.name.casefold() == voice.name.casefold()), None)
                if entry is not None and entry.clone is not None:
                    self._prompts[voice.ref_audio] = entry.clone
        if not self.saved:
            return service
        catalogue = self._catalogue(service.catalogue.spec, self._clone_with(service))
        for problem in catalogue.errors:
            log.warning("saved voice skipped: %s", problem)
        return dataclasses.replace(service, catalogue=catalogue, info=build_info(catalogue, __version__))

    # ------------------------------------------------------------------ reading

    def abilities(self) -> dict[str, Any]:
        """What the page may offer: cloning (a Base model), designing (VoiceDesign), languages."""
        catalogue = self.slot.catalogue
        kind = catalogue.spec.model_type if catalogue is not None else None
        return {"can_clone": kind == "base", "can_design": kind == "voice_design",
                "languages": list(catalogue.tags) if catalogue is not None else []}

    def voices(self) -> list[dict[str, Any]]:
        """Every served voice for the page, in catalogue order."""
        catalogue = self.slot.catalogue
        if catalogue is None:
            return []
        configured = {v.name.casefold() for v in self.config.voices}
        saved = {v.name.casefold(): v for v in self.saved}
        listed = []
        for entry in catalogue.voices:
            mine = saved.get(entry.name.casefold())
            kind = ("designed" if mine.designed else "saved") if mine else \
                "config" if entry.name.casefold() in configured else "preset"
            listed.append({"name": entry.name, "kind": kind, "description": entry.description,
                           "languages": list(entry.languages), "editable": mine is not None,
                           "model": catalogue.label})
        return listed

    async def decode(self, audio: bytes) -> Clip:
        """An uploaded recording decoded and checked, off the event loop."""
        return await asyncio.to_thread(decode_upload, audio)

    # ------------------------------------------------------------------ changes

    async def save(self, form: VoiceForm) -> dict[str, Any]:
        """Save a clone (form.audio, a Base model) or a designed voice (form.instruct, a
        VoiceDesign model); the voice is served and listed when this returns."""
        service = await self.slot.ready()
        kind = service.catalogue.spec.model_type
        name = check_name(form.name)
        description = check_text("description", form.description, MAX_DESCRIPTION_CHARS) or name
        language = self._language(service, form.language)
        self._check_free(service, name)
        self._reserved.add(name.casefold())
        try:
            if kind == "base":
                if form.audio is None:
                    raise ApiError(422, "send a recording (the form's audio file) to clone a voice")
                transcript = check_text("transcript", form.transcript, MAX_TRANSCRIPT_CHARS) or None
                clip = await self.decode(form.audio)
                voice = await asyncio.to_thread(self._save_clone, service, SavedVoice(
                    name, description, language, transcript=transcript), clip)
            elif kind == "voice_design":
                instruct = check_text("voice description (instruct)", form.instruct, MAX_INSTRUCT_CHARS)
                if not instruct:
                    raise ApiError(422, "describe the voice (instruct) to design it")
                voice = await asyncio.to_thread(self.store.add, SavedVoice(
                    name, description, language, instruct=instruct), None, self._count())
            else:
                raise ApiError(422, f"{service.catalogue.label} cannot make new voices: cloning needs a Base "
                                    f"model, designing a VoiceDesign model")
            async with self._changing:
                self._publish(self.saved + [voice], service, undo=lambda: self._discard(voice))
        finally:
            self._reserved.discard(name.casefold())
        log.info("voice lab: saved %s voice %r", "designed" if voice.designed else "cloned", name)
        return self._listed(name)

    async def rename(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change a saved voice's name, description or language."""
        service = await self.slot.ready()
        async with self._changing:
            voice = self._own(name)
            unknown = set(changes) - {"name", "description", "language"}
            if unknown or not all(isinstance(v, str) for v in changes.values()):
                raise ApiError(422, "send name, description and language as strings, nothing else")
            new_name = check_name(changes.get("name", voice.name).strip())
            if new_name.casefold() != voice.name.casefold():
                self._check_free(service, new_name)
            description = check_text("description", changes.get("description", voice.description).strip(),
                                     MAX_DESCRIPTION_CHARS) or new_name
            language = self._language(service, changes["language"]) if "language" in changes else voice.language
            updated = dataclasses.replace(voice, name=new_name, description=description, language=language)
            await asyncio.to_thread(self.store.update, updated)
            self._publish([updated if v is voice else v for v in self.saved], service,
                          undo=lambda: self.store.update(voice))
        log.info("voice lab: %r is now %r", name, new_name)
        return self._listed(new_name)

    async def delete(self, name: str) -> None:
        """Delete a saved voice: gone from the catalogue, its files removed. A response being
        spoken in it finishes (it holds its own copy of the voice)."""
        service = await self.slot.ready()
        async with self._changing:
            voice = self._own(name)
            default = self.config.server.default_voice
            if default is not None and default.casefold() == voice.name.casefold():
                raise ApiError(409, f"{voice.name!r} is the default voice (server.default_voice); change that first")
            self._publish([v for v in self.saved if v is not voice], service)
            await asyncio.to_thread(self._discard, voice)
        log.info("voice lab: deleted %r", voice.name)

    async def preview(self, form: VoiceForm) -> VoiceEntry:
        """An unsaved voice to speak a preview with: the form's recording (a Base model) or
        description (VoiceDesign); nothing is written."""
        service = await self.slot.ready()
        kind = service.catalogue.spec.model_type
        language = self._language(service, form.language) or "auto"
        if kind == "base":
            if form.audio is None:
                raise ApiError(422, "send a recording (the form's audio file) to preview a clone")
            transcript = check_text("transcript", form.transcript, MAX_TRANSCRIPT_CHARS) or None
            clip = await self.decode(form.audio)
            prompt = await asyncio.to_thread(self._encode, service, clip, transcript)
            return VoiceEntry(PREVIEW_NAME, PREVIEW_NAME, (), language, clone=prompt)
        if kind == "voice_design":
            instruct = check_text("voice description (instruct)", form.instruct, MAX_INSTRUCT_CHARS)
            if not instruct:
                raise ApiError(422, "describe the voice (instruct) to preview it")
            return VoiceEntry(PREVIEW_NAME, PREVIEW_NAME, (), language, instruct=instruct)
        raise ApiError(422, f"{service.catalogue.label} cannot make new voices: previews need a Base or a "
                            f"VoiceDesign model")

    # ------------------------------------------------------------------ internals

    def _catalogue(self, spec: Any, clone: Callable[[VoiceConfig], ClonePrompt] | None,
                   saved: list[SavedVoice] | None = None, preview: bool = False) -> Catalogue:
        voices = tuple(self.config.voices) + tuple(v.config() for v in (self.saved if saved is None else saved))
        return Catalogue(spec, voices, self.config.server.default_voice, clone, preview=preview)

    def _publish(self, saved: list[SavedVoice], service: Service, undo: Callable[[], None] | None = None) -> None:
        """Serve `saved` from now on (a new catalogue for the slot); the catalogue is built from
        prepared prompts only, so this is quick enough for the event loop."""
        try:
            catalogue = self._catalogue(service.catalogue.spec, self._prepared, saved)
        except CatalogueError as e:
            if undo is not None:
                undo()
            raise ApiError(409, str(e)) from None
        self.saved = saved
        self.slot.load(dataclasses.replace(service, catalogue=catalogue, info=build_info(catalogue, __version__)))
        if self.on_change is not None:
            self.on_change()

    def _prepared(self, voice: VoiceConfig) -> ClonePrompt:
        prompt = self._prompts.get(voice.ref_audio or "")
        if prompt is None:
            raise CloneError(f"voice {voice.name!r}: not prepared")
        return prompt

    def _clone_with(self, service: Service) -> Callable[[VoiceConfig], ClonePrompt]:
        """The catalogue's clone callable at start: prepared prompts, else the encoders."""
        def clone(voice: VoiceConfig) -> ClonePrompt:
            if (prompt := self._prompts.get(voice.ref_audio or "")) is not None:
                return prompt
            prompt = self._prepare(service, voice)
            assert voice.ref_audio is not None
            self._prompts[voice.ref_audio] = prompt
            return prompt
        return clone

    def _prepare(self, service: Service, voice: VoiceConfig) -> ClonePrompt:
        """A saved clone through the encoders (features cached in its folder) and its first words."""
        assert voice.ref_audio is not None
        with self._encoding:
            cloner = self._encoders(service)
            cloner.cache_dir = Path(voice.ref_audio).parent
            return prepare_clone(cloner, service.engine, service.params, voice)

    def _encoders(self, service: Service) -> Cloner:
        if self._cloner is None or self._cloner.model is not service.engine.model:
            self._cloner = Cloner(service.engine.model)
        return self._cloner

    def _encode(self, service: Service, clip: Clip, transcript: str | None) -> ClonePrompt:
        """A preview's clone prompt straight from the samples; nothing cached."""
        with self._encoding:
            try:
                ref = self._encoders(service).encode(clip.pcm, 24000, "the recording")
            except CloneError as e:
                raise ApiError(422, str(e)) from None
        if transcript is None:
            return ClonePrompt(ref.speaker_vector, None, None)
        return ClonePrompt(ref.speaker_vector, ref.codes, transcript)

    def _save_clone(self, service: Service, voice: SavedVoice, clip: Clip) -> SavedVoice:
        """Write the clone's folder and prepare it; a failure removes the folder again."""
        voice = self.store.add(voice, clip.pcm, self._count())
        config = voice.config()
        try:
            prompt = self._prepare(service, config)
        except CloneError as e:
            self.store.remove(voice)
            raise ApiError(422, str(e).replace(f"voice {voice.name!r}: ", "")) from None
        except BaseException:
            self.store.remove(voice)
            raise
        assert config.ref_audio is not None
        self._prompts[config.ref_audio] = prompt
        return voice

    def _count(self) -> int:
        """Saved voices for the cap, counting the other saves under way."""
        return len(self.saved) + len(self._reserved) - 1

    def _discard(self, voice: SavedVoice) -> None:
        if not voice.designed:
            self._prompts.pop(voice.config().ref_audio or "", None)
        self.store.remove(voice)

    def _own(self, name: str) -> SavedVoice:
        """The saved voice called `name`: 404 for no voice, 403 for a preset or configured one."""
        voice = next((v for v in self.saved if v.name.casefold() == name.casefold()), None)
        if voice is not None:
            return voice
        catalogue = self.slot.catalogue
        if catalogue is not None and any(e.name.casefold() == name.casefold() for e in catalogue.voices):
            raise ApiError(403, f"{name!r} is a preset or configured voice; only saved voices can be changed")
        raise ApiError(404, f"no voice {name!r}")

    def _check_free(self, service: Service, name: str) -> None:
        key = name.casefold()
        if key in self._reserved or any(e.name.casefold() == key for e in service.catalogue.voices) or \
                any(v.name.casefold() == key for v in self.saved):
            raise ApiError(409, f"the name {name!r} is taken")

    def _language(self, service: Service, language: str) -> str | None:
        """A voice's default language as given (validated), None for none or auto."""
        language = language.strip()
        if not language or language.lower() == "auto":
            return None
        model_language(language, service.catalogue.spec.supported_languages)  # raises LanguageNotSupported
        return language

    def _listed(self, name: str) -> dict[str, Any]:
        return next(v for v in self.voices() if v["name"].casefold() == name.casefold())
