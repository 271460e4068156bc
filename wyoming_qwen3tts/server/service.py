"""What every connection shares: the settings, the voice list, the loaded model, and the
requests in flight (for request ids, and for an orderly shutdown)."""
from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

from wyoming.info import Info

from .. import __version__
from ..config import ServerSettings
from ..engine.sampling import SamplingParams
from ..engine.scheduler import Scheduler
from ..engine.stream import AudioStream
from ..engine.utterance import Utterance
from .directory import Directory
from .profile import Profile
from .speech import Speech, SpeechError, Synth
from .voices import Catalogue, VoiceEntry, VoiceNotFound, build_info

log = logging.getLogger(__name__)

POLL_S = 0.05  # how often a request waiting for the model looks again (the model loads on another thread)


@dataclass(frozen=True)
class Service:
    """One loaded model: the engine, its voices and the sampling of every request."""

    engine: Scheduler
    catalogue: Catalogue
    info: Info
    params: SamplingParams  # greedy or the model's defaults, seed
    settings: ServerSettings = field(default_factory=ServerSettings)
    index: int = 0  # in the served models (config.model_entries)


@dataclass(frozen=True)
class Unsaved:
    """A voice in no catalogue, spoken by model `model` (the voice lab's previews)."""

    model: int
    entry: VoiceEntry


class Loader(Protocol):
    """Loads models on request (server/model_set.py); the slot asks, the loader answers with
    ServiceSlot.load (on the event loop) or records a failure."""

    def request(self, index: int) -> None:
        """Start loading model `index` unless it is loading or loaded; returns at once."""

    def failure(self, index: int) -> BaseException | None:
        """Why model `index` could not be loaded, if it could not."""


@dataclass(eq=False)
class ServiceSlot:
    """The server's shared state. `info` is None until the voice list is known (`describe` then
    gets no answer, so Home Assistant retries); a model's requests wait for it to be loaded
    (download, conversion, compilation, warm-up) up to `settings.loading_wait` seconds; a
    model not loaded at start is loaded on its first request through `loader`.
    `service`: a model already loaded (tests and single-model callers)."""

    info: Info | None = None
    service: Service | None = None
    settings: ServerSettings = field(default_factory=ServerSettings)  # the server's (a service's are its own)
    directory: Directory | None = None  # the voice list; previews (clones not yet encoded) until loaded
    loader: Loader | None = None
    stopping: bool = False  # SIGTERM/SIGINT: no new work
    active: set[Speech] = field(default_factory=set)  # responses accepted and not yet ended
    profile: Profile = field(default_factory=Profile)  # first-audio timings (settings.profile)
    services: dict[int, Service] = field(default_factory=dict)  # the loaded models, by index
    holds: collections.Counter[int] = field(default_factory=collections.Counter)  # responses using each model
    last_used: dict[int, float] = field(default_factory=dict)  # monotonic time of each model's last response
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        self.profile.enabled = self.settings.profile
        if self.service is not None:
            self.load(self.service)

    def next_id(self) -> int:
        """A server-wide request id, for logs."""
        return next(self._ids)

    def publish(self, voices: Directory | Catalogue) -> None:
        """The voice list is known (from the models' config, before they are loaded)."""
        if isinstance(voices, Catalogue):
            voices = Directory({0: voices}, self.settings.default_voice)
        self.directory, self.info = voices, build_info(voices, __version__)

    def load(self, service: Service) -> None:
        """A model is loaded: its requests may run, its voices (clones encoded) are listed."""
        self.services[service.index] = service
        if self.directory is None:
            self.publish(Directory({service.index: service.catalogue}, self.settings.default_voice))
        else:
            self.publish(self.directory.replaced(service.index, service.catalogue, self.settings.default_voice))

    def unload(self, index: int) -> Service | None:
        """Take model `index` out of service (the caller closes its engine); its voices stay listed."""
        return self.services.pop(index, None)

    def idle(self, index: int) -> bool:
        """No response uses model `index` (one between two sentences still does)."""
        return self.holds[index] == 0

    async def ready(self, index: int = 0) -> Service:
        """Model `index`, loaded; waits for it up to settings.loading_wait seconds (asking the
        loader for it), raising SpeechError when it does not come in time, cannot be loaded,
        or the server is stopping."""
        deadline = time.monotonic() + self.settings.loading_wait
        while True:
            if self.stopping:
                raise SpeechError("the server is shutting down", "ShuttingDown")
            if (service := self.services.get(index)) is not None:
                return service
            if self.loader is not None:
                if (error := self.loader.failure(index)) is not None:
                    raise SpeechError(f"the voice's model could not be loaded: {error}", "ModelFailed")
                self.loader.request(index)
            if time.monotonic() >= deadline:
                raise SpeechError(f"the model is still loading after waiting {self.settings.loading_wait:.0f} s "
                                  f"(the first start downloads and converts it); try again shortly", "NotReady")
            await asyncio.sleep(POLL_S)

    def resolve(self, name: str | None, language: str | None = None) -> tuple[int, VoiceEntry, str]:
        """(model index, voice, language) of a request; VoiceNotFound before the voices are known."""
        if self.directory is None:
            raise VoiceNotFound("the voice list is not known yet (the model is loading)")
        return self.directory.resolve(name, language)

    async def synth(self, label: str, name: str | None, language: str | None, words: bool, paced: bool,
                    unsaved: Unsaved | None = None) -> Synth:
        """The way to the engine for one response, once its voice's model is loaded (waiting
        for it, bounded) and the voice resolved; raises SpeechError or the voice's
        ValueError. Every protocol's responses come through here, so they join the same
        continuous batching. words: sentences start with their first words, as utterances
        that grow (word-level feeding). paced: the client plays the audio as it arrives (a
        streamed response), so the engine sends short chunks until it is ahead
        (engine/pacing.py), for a sentence heard as soon as it has audio (Synth). unsaved: a
        voice in no catalogue (the voice lab's preview) instead of `name`. The model is held
        until the response ends (Synth.release): it is not unloaded under it."""
        if unsaved is not None:
            index = unsaved.model
            service = await self.ready(index)
            entry, lang = unsaved.entry, service.catalogue.language(unsaved.entry, language)
        else:
            index = self.resolve(name)[0] if self.directory is not None else 0
            service = await self.ready(index)
            _, entry, lang = self.resolve(name, language)  # again: the loaded model's voices
        log.info("%s: voice %s, language %s", label, entry.name, lang)
        engine, params = service.engine, service.params
        self.holds[index] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.holds[index] -= 1
                self.last_used[index] = time.monotonic()

        def submit(sentence: str, heard: bool) -> AudioStream:
            return engine.submit(entry.request(sentence, lang), params, paced=paced and heard)

        def open_utterance(heard: bool) -> Utterance:
            return engine.open(entry.request("", lang), params, paced=paced and heard)

        return Synth(submit, open_utterance if words else None, release)

    def in_flight(self) -> list[Speech]:
        return [s for s in self.active if not s.done]

    async def drain(self, timeout: float) -> bool:
        """Wait until no response is in flight; False if some still are after `timeout` s."""
        deadline = time.monotonic() + timeout
        while self.in_flight():
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(POLL_S)
        return True
