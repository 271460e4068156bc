"""What every connection shares: the settings, the voice list, the loaded model, and the
requests in flight (for request ids, and for an orderly shutdown)."""
from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass, field

from wyoming.info import Info

from .. import __version__
from ..config import ServerSettings
from ..engine.sampling import SamplingParams
from ..engine.scheduler import Scheduler
from ..engine.stream import AudioStream
from ..engine.utterance import Utterance
from .profile import Profile
from .speech import Speech, SpeechError, Synth
from .voices import Catalogue, VoiceEntry, build_info

log = logging.getLogger(__name__)

POLL_S = 0.05  # how often a request waiting for the model looks again (the model loads on another thread)


@dataclass(frozen=True)
class Service:
    """The loaded model: the engine, its voices and the sampling of every request."""

    engine: Scheduler
    catalogue: Catalogue
    info: Info
    params: SamplingParams  # greedy or the model's defaults, seed
    settings: ServerSettings = field(default_factory=ServerSettings)


@dataclass(eq=False)
class ServiceSlot:
    """The server's shared state. `info` is None until the voice list is known (`describe` then
    gets no answer, so Home Assistant retries); `service` is None until the model is loaded
    (download, conversion, compilation, warm-up), and requests wait for it up to
    `settings.loading_wait` seconds."""

    info: Info | None = None
    service: Service | None = None
    settings: ServerSettings = field(default_factory=ServerSettings)  # the server's (a service's are its own)
    catalogue: Catalogue | None = None  # the voice list; a preview (clones not yet encoded) until loaded
    stopping: bool = False  # SIGTERM/SIGINT: no new work
    active: set[Speech] = field(default_factory=set)  # responses accepted and not yet ended
    profile: Profile = field(default_factory=Profile)  # first-audio timings (settings.profile)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        self.profile.enabled = self.settings.profile
        if self.service is not None:
            self.load(self.service)

    def next_id(self) -> int:
        """A server-wide request id, for logs."""
        return next(self._ids)

    def publish(self, catalogue: Catalogue) -> None:
        """The voice list is known (from the model's config, before the model is loaded)."""
        self.catalogue, self.info = catalogue, build_info(catalogue, __version__)

    def load(self, service: Service) -> None:
        self.service, self.catalogue, self.info = service, service.catalogue, service.info

    async def ready(self) -> Service:
        """The loaded service; waits for it up to settings.loading_wait seconds, raising
        SpeechError when it does not come in time or the server is stopping."""
        deadline = time.monotonic() + self.settings.loading_wait
        while True:
            if self.stopping:
                raise SpeechError("the server is shutting down", "ShuttingDown")
            if self.service is not None:
                return self.service
            if time.monotonic() >= deadline:
                raise SpeechError(f"the model is still loading after waiting {self.settings.loading_wait:.0f} s "
                                 f"(the first start downloads and converts it); try again shortly", "NotReady")
            await asyncio.sleep(POLL_S)

    async def synth(self, label: str, name: str | None, language: str | None, words: bool, paced: bool,
                    entry: VoiceEntry | None = None) -> Synth:
        """The way to the engine for one response, once the model is loaded (waiting for it,
        bounded) and the voice resolved; raises SpeechError or the voice's ValueError. Every
        protocol's responses come through here, so they join the same continuous batching.
        words: sentences start with their first words, as utterances that grow (word-level
        feeding). paced: the client plays the audio as it arrives (a streamed response), so
        the engine sends short chunks until it is ahead (engine/pacing.py), for a sentence
        heard as soon as it has audio (Synth). entry: a voice that is not in the catalogue (the
        voice lab's preview of an unsaved voice) instead of `name`."""
        service = await self.ready()
        if entry is None:
            entry, lang = service.catalogue.resolve(name, language)
        else:
            lang = service.catalogue.language(entry, language)
        log.info("%s: voice %s, language %s", label, entry.name, lang)
        engine, params = service.engine, service.params

        def submit(sentence: str, heard: bool) -> AudioStream:
            return engine.submit(entry.request(sentence, lang), params, paced=paced and heard)

        def open_utterance(heard: bool) -> Utterance:
            return engine.open(entry.request("", lang), params, paced=paced and heard)

        return Synth(submit, open_utterance if words else None)

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
