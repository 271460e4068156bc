"""The voice lab: every operation of the HTTP side that reads or changes the voice list
(docs/HTTP.md), in one class, over the served models of a ServiceSlot.

A Base model clones voices from recordings (clone/cloner.py), a VoiceDesign model designs
them from a description, a 1.7B CustomVoice model styles a preset speaker with an instruction
(with several models: the first of each kind serves the lab); saved ones live in the
VoiceStore and join that model's catalogue after its configured voices, so they are in
Wyoming `describe` at once and at every start. The clone encoders run on a worker
thread (Wyoming keeps serving meanwhile); a clone's features are cached in its own folder
(Cloner.cache_dir), so they are saved, backed up and deleted with it. Changes are serialised;
names being saved are reserved, so of two saves of one name the second gets 409 at once.

Surface: prepare() and attach() at start, abilities(), voices(), decode(), save(), rename(),
delete(), preview().
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
from ..model.spec import VoiceSpec
from .api_error import ApiError
from .directory import Directory, ModelPlan
from .http_forms import VoiceForm
from .loading import catalogue_of, prepare_clone, preview_directory
from .service import Service, ServiceSlot, Unsaved
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
from .voices import (
    LANGUAGE_TAGS,
    Catalogue,
    CatalogueError,
    VoiceEntry,
    build_info,
    model_language,
    styles_speakers,
)

log = logging.getLogger(__name__)

PREVIEW_NAME = "(preview)"
# The model each kind of voice is made and served by (SavedVoice.kind), and its name in /api/voices.
MAKERS: dict[str, Callable[[VoiceSpec], bool]] = {
    "clone": lambda spec: spec.model_type == "base",
    "designed": lambda spec: spec.model_type == "voice_design",
    "styled": styles_speakers,
}
NEEDS = {"clone": "a Base model", "designed": "a VoiceDesign model", "styled": "a 1.7B CustomVoice model"}
LISTED_KIND = {"clone": "saved", "designed": "designed", "styled": "styled"}


class VoiceLab:
    """Saved voices over the slot's model. Built before the model loads; `attach` adds the
    saved voices to the loaded service."""

    def __init__(self, slot: ServiceSlot, config: ServerConfig, on_change: Callable[[], None] | None = None) -> None:
        """on_change: called after the voice list changed (Home Assistant's refresh)."""
        self.slot, self.config, self.on_change = slot, config, on_change
        self.store = VoiceStore(config.model.data_path / "voices")
        self.saved: list[SavedVoice] = []
        self.plans: list[ModelPlan] = []
        self._prompts: dict[str, ClonePrompt] = {}  # by recording path
        self._cloner: Cloner | None = None
        self._encoding = threading.Lock()  # one user of the encoders at a time
        self._changing = asyncio.Lock()
        self._reserved: set[str] = set()  # casefolded names being saved

    # ------------------------------------------------------------------ start (loading thread)

    def prepare(self, plans: list[ModelPlan]) -> Directory | None:
        """The voice list before any model loads (None: not known yet), the saved voices with
        their models' voices; reads the store."""
        self.plans, self.saved = list(plans), self.store.load()
        if any(p.spec is None for p in plans):
            return None
        for voice in self.saved:
            if self._model_of(voice) is None:
                log.warning("saved voice %r is not served: it needs %s, and none is served", voice.name,
                            NEEDS[voice.kind])
        return preview_directory(self.config, [self._with_saved(p.index) for p in plans])

    def attach(self, service: Service) -> Service:
        """The loaded service with the saved voices in its catalogue (their recordings through
        the encoders, or from their folder's cache). Runs on the loading thread."""
        for voice in self.config.voices:  # already prepared by build_service: reused, not encoded again
            if voice.ref_audio is not None:
                entry = next((e for e in service.catalogue.voices if e.name.casefold() == voice.name.casefold()), None)
                if entry is not None and entry.clone is not None:
                    self._prompts[voice.ref_audio] = entry.clone
        if not self.plans:  # loaded without prepare(): nothing planned, nothing saved read
            self.plans = [ModelPlan(service.index, self.config.model_entries[0], service.catalogue.spec,
                                    self.config.voices)]
        if self.plans[service.index].spec is None:
            self.plans[service.index] = dataclasses.replace(self.plans[service.index], spec=service.catalogue.spec)
        if not any(self._model_of(v) == service.index for v in self.saved):
            return service
        catalogue = self._catalogue(service.index, self._clone_with(service))
        for problem in catalogue.errors:
            log.warning("saved voice skipped: %s", problem)
        return dataclasses.replace(service, catalogue=catalogue, info=build_info(catalogue, __version__))

    # ------------------------------------------------------------------ reading

    def abilities(self) -> dict[str, Any]:
        """What the page may offer: cloning (a Base model), designing (VoiceDesign), styling a
        preset speaker (1.7B CustomVoice) and that model's speakers, languages."""
        directory = self.slot.directory
        tags = {t for c in directory.catalogues.values() for t in c.tags} if directory is not None else set()
        style = self._kind_index("styled")
        return {"can_clone": self._kind_index("clone") is not None,
                "can_design": self._kind_index("designed") is not None,
                "can_style": style is not None, "speakers": self._speakers(style),
                "languages": [t for t in LANGUAGE_TAGS.values() if t in tags]}

    def voices(self) -> list[dict[str, Any]]:
        """Every served voice for the page, in the order of the voice list."""
        directory = self.slot.directory
        if directory is None:
            return []
        configured = {v.name.casefold() for v in self.config.voices}
        saved = {v.name.casefold(): v for v in self.saved}
        listed = []
        for catalogue in directory.catalogues.values():
            for entry in catalogue.voices:
                mine = saved.get(entry.name.casefold())
                kind = LISTED_KIND[mine.kind] if mine else \
                    "config" if entry.name.casefold() in configured else "preset"
                voice = {"name": entry.name, "kind": kind, "description": entry.description,
                         "languages": list(entry.languages), "editable": mine is not None, "model": catalogue.label}
                if mine is not None and mine.kind == "styled":
                    voice.update(speaker=mine.speaker, instruct=mine.instruct)
                listed.append(voice)
        return listed

    async def decode(self, audio: bytes) -> Clip:
        """An uploaded recording decoded and checked, off the event loop."""
        return await asyncio.to_thread(decode_upload, audio)

    # ------------------------------------------------------------------ changes

    async def save(self, form: VoiceForm) -> dict[str, Any]:
        """Save a clone (form.audio, a Base model), a designed voice (form.instruct, a
        VoiceDesign model) or a styled speaker (form.speaker and form.instruct, a 1.7B
        CustomVoice model); the voice is served and listed when this returns."""
        index, kind = self._maker(form, "save")
        service = await self.slot.ready(index)
        name = check_name(form.name)
        description = check_text("description", form.description, MAX_DESCRIPTION_CHARS) or name
        language = self._language(service, form.language)
        self._check_free(name)
        self._reserved.add(name.casefold())
        try:
            if kind == "clone":
                if form.audio is None:
                    raise ApiError(422, "send a recording (the form's audio file) to clone a voice")
                transcript = check_text("transcript", form.transcript, MAX_TRANSCRIPT_CHARS) or None
                clip = await self.decode(form.audio)
                voice = await asyncio.to_thread(self._save_clone, service, SavedVoice(
                    name, description, language, transcript=transcript), clip)
            else:
                speaker, instruct = self._worded(index, kind, form, "save")
                voice = await asyncio.to_thread(self.store.add, SavedVoice(
                    name, description, language, instruct=instruct, speaker=speaker), None, self._count())
            async with self._changing:
                self._publish(self.saved + [voice], index, undo=lambda: self._discard(voice))
        finally:
            self._reserved.discard(name.casefold())
        log.info("voice lab: saved %s voice %r", "cloned" if kind == "clone" else kind, name)
        return self._listed(name)

    async def rename(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change a saved voice's name, description or language."""
        async with self._changing:
            voice = self._own(name)
            index = self._served_by(voice)
            service = await self.slot.ready(index)
            unknown = set(changes) - {"name", "description", "language"}
            if unknown or not all(isinstance(v, str) for v in changes.values()):
                raise ApiError(422, "send name, description and language as strings, nothing else")
            new_name = check_name(changes.get("name", voice.name).strip())
            if new_name.casefold() != voice.name.casefold():
                self._check_free(new_name)
            description = check_text("description", changes.get("description", voice.description).strip(),
                                     MAX_DESCRIPTION_CHARS) or new_name
            language = self._language(service, changes["language"]) if "language" in changes else voice.language
            updated = dataclasses.replace(voice, name=new_name, description=description, language=language)
            await asyncio.to_thread(self.store.update, updated)
            self._publish([updated if v is voice else v for v in self.saved], index,
                          undo=lambda: self.store.update(voice))
        log.info("voice lab: %r is now %r", name, new_name)
        return self._listed(new_name)

    async def delete(self, name: str) -> None:
        """Delete a saved voice: gone from the catalogue, its files removed. A response being
        spoken in it finishes (it holds its own copy of the voice)."""
        async with self._changing:
            voice = self._own(name)
            index = self._served_by(voice)
            await self.slot.ready(index)
            default = self.config.server.default_voice
            if default is not None and default.casefold() == voice.name.casefold():
                raise ApiError(409, f"{voice.name!r} is the default voice (server.default_voice); change that first")
            self._publish([v for v in self.saved if v is not voice], index)
            await asyncio.to_thread(self._discard, voice)
        log.info("voice lab: deleted %r", voice.name)

    async def preview(self, form: VoiceForm) -> Unsaved:
        """An unsaved voice to speak a preview with: the form's recording (a Base model),
        description (VoiceDesign) or speaker and style (1.7B CustomVoice); nothing is written."""
        index, kind = self._maker(form, "preview")
        service = await self.slot.ready(index)
        given = self._language(service, form.language)
        language = model_language(given, service.catalogue.spec.supported_languages) if given else "auto"
        if kind == "clone":
            if form.audio is None:
                raise ApiError(422, "send a recording (the form's audio file) to preview a clone")
            transcript = check_text("transcript", form.transcript, MAX_TRANSCRIPT_CHARS) or None
            clip = await self.decode(form.audio)
            prompt = await asyncio.to_thread(self._encode, service, clip, transcript)
            return Unsaved(index, VoiceEntry(PREVIEW_NAME, PREVIEW_NAME, (), language, clone=prompt))
        speaker, instruct = self._worded(index, kind, form, "preview")
        return Unsaved(index, VoiceEntry(PREVIEW_NAME, PREVIEW_NAME, (), language, speaker=speaker,
                                         instruct=instruct))

    # ------------------------------------------------------------------ internals

    def _catalogue(self, index: int, clone: Callable[[VoiceConfig], ClonePrompt] | None,
                   saved: list[SavedVoice] | None = None, preview: bool = False) -> Catalogue:
        """Model `index`'s voices: its planned ones, then the saved ones it serves."""
        return catalogue_of(self._with_saved(index, saved), self.config, len(self.plans) > 1, clone,
                            preview=preview)

    def _with_saved(self, index: int, saved: list[SavedVoice] | None = None) -> ModelPlan:
        """Model `index`'s plan with the saved voices it serves after its configured ones."""
        plan = self.plans[index]
        mine = tuple(v.config() for v in (self.saved if saved is None else saved) if self._model_of(v) == index)
        return dataclasses.replace(plan, voices=plan.voices + mine)

    def _publish(self, saved: list[SavedVoice], index: int, undo: Callable[[], None] | None = None) -> None:
        """Serve `saved` from now on (a new catalogue for model `index`, the one loaded now:
        another change may have been published); the catalogue is built from prepared
        prompts only, so this is quick enough for the event loop."""
        service = self.slot.services.get(index)
        try:
            if service is None:
                raise CatalogueError("the voice's model was unloaded meanwhile; try again")
            catalogue = self._catalogue(index, self._prepared, saved)
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
        if voice.kind == "clone":
            self._prompts.pop(voice.config().ref_audio or "", None)
        self.store.remove(voice)

    def _kind_index(self, kind: str) -> int | None:
        """The model that makes the lab's voices of `kind` (SavedVoice.kind): the first served."""
        return next((p.index for p in self.plans if p.spec is not None and MAKERS[kind](p.spec)), None)

    def _model_of(self, voice: SavedVoice) -> int | None:
        return self._kind_index(voice.kind)

    def _served_by(self, voice: SavedVoice) -> int:
        index = self._model_of(voice)
        if index is None:
            raise ApiError(409, f"{voice.name!r} is not served: it needs {NEEDS[voice.kind]}, and none is served")
        return index

    def _speakers(self, index: int | None) -> list[dict[str, str]]:
        """Model `index`'s preset speakers, by the model's name for each, with the description
        its voice list gives them ("Ryan (English, dynamic male)")."""
        if index is None:
            return []
        plan, directory = self.plans[index], self.slot.directory
        catalogue = directory.catalogues.get(index) if directory is not None else None
        described = {e.name: e.description for e in catalogue.voices} if catalogue is not None else {}
        assert plan.spec is not None  # _kind_index found it
        return [{"speaker": s.name, "description": described.get(plan.renames.get(s.name, s.name), s.name)}
                for s in sorted(plan.spec.speakers, key=lambda s: s.name)]

    def _worded(self, index: int, kind: str, form: VoiceForm, what: str) -> tuple[str | None, str]:
        """(speaker, instruct) of a designed voice (no speaker) or a styled speaker, checked."""
        if kind == "designed":
            instruct = check_text("voice description (instruct)", form.instruct, MAX_INSTRUCT_CHARS)
            if not instruct:
                raise ApiError(422, f"describe the voice (instruct) to {what} it")
            return None, instruct
        plan = self.plans[index]
        assert plan.spec is not None  # _kind_index found it
        key = form.speaker.casefold()
        speaker = next((s.name for s in plan.spec.speakers
                        if key in (s.name.casefold(), plan.renames.get(s.name, s.name).casefold())), None)
        if speaker is None:
            raise ApiError(422, f"unknown speaker {form.speaker!r} (speakers: "
                                f"{', '.join(sorted(s.name for s in plan.spec.speakers))})")
        instruct = check_text("style (instruct)", form.instruct, MAX_INSTRUCT_CHARS)
        if not instruct:
            raise ApiError(422, f"give the style (instruct): how {speaker} should speak")
        return speaker, instruct

    def _maker(self, form: VoiceForm, what: str) -> tuple[int, str]:
        """The model a save or preview of `form` needs and the kind of voice it makes: a Base
        model for a recording, a VoiceDesign model for a description (the only one of them
        served for either), a 1.7B CustomVoice model for a speaker with a style; 409 for a
        speaker where no such model is served, 422 for a form that makes nothing here."""
        if form.speaker:
            if form.audio is not None:
                raise ApiError(422, "send a recording, or a preset speaker with a style; not both")
            style = self._kind_index("styled")
            if style is None:
                raise ApiError(409, f"a preset speaker with a style needs {NEEDS['styled']}, and none is served "
                                    f"(0.6B CustomVoice models ignore style instructions)")
            return style, "styled"
        clone, design = self._kind_index("clone"), self._kind_index("designed")
        if clone is not None and (form.audio is not None or design is None):
            return clone, "clone"
        if design is not None and (form.instruct.strip() or clone is None):
            return design, "designed"
        if clone is not None:
            raise ApiError(422, f"send a recording (the form's audio file) or a voice description (instruct) "
                                f"to {what} a voice")
        if self._kind_index("styled") is not None:
            raise ApiError(422, f"name a preset speaker (speaker) and its style (instruct) to {what} a styled voice")
        raise ApiError(422, "no served model can make new voices: cloning needs a Base model, designing a "
                            "VoiceDesign model, styling a preset speaker a 1.7B CustomVoice model")

    def _own(self, name: str) -> SavedVoice:
        """The saved voice called `name`: 404 for no voice, 403 for a preset or configured one."""
        voice = next((v for v in self.saved if v.name.casefold() == name.casefold()), None)
        if voice is not None:
            return voice
        directory = self.slot.directory
        if directory is not None and any(e.name.casefold() == name.casefold() for e in directory.voices):
            raise ApiError(403, f"{name!r} is a preset or configured voice; only saved voices can be changed")
        raise ApiError(404, f"no voice {name!r}")

    def _check_free(self, name: str) -> None:
        key = name.casefold()
        served = self.slot.directory.voices if self.slot.directory is not None else ()
        if key in self._reserved or any(e.name.casefold() == key for e in served) or \
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
