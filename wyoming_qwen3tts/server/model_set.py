"""The served models' lives: loaded at start or on a first request, one at a time, and
unloaded again, least recently used first, when a load would exceed model.memory_budget_mb.

Loads run on daemon threads (minutes on a first start: download, conversion, compilation);
what the slot sees changes only on the event loop. A model that fails to load fails its own
requests (ModelFailed), not the others' (docs/ARCHITECTURE.md, "Several models in one server").
"""
from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from ..config import ServerConfig
from ..engine.memory import Resident
from .directory import ModelPlan
from .loading import Shared, build_service
from .models import conversion_dir
from .service import Service, ServiceSlot
from .weights_choice import formats

log = logging.getLogger(__name__)


class ModelSet:
    """The slot's Loader for every planned model."""

    def __init__(self, config: ServerConfig, plans: list[ModelPlan], slot: ServiceSlot,
                 loop: asyncio.AbstractEventLoop, attach: Callable[[Service], Service] | None = None) -> None:
        """attach: what each loaded service becomes before it serves (the voice lab adds its
        saved voices), on the loading thread."""
        self.config, self.plans, self.slot, self.loop, self.attach = config, plans, slot, loop, attach
        self._one_at_a_time = threading.Lock()  # a load's peak memory and CPU are not shared
        self._loading: set[int] = set()
        self._failures: dict[int, BaseException] = {}
        self._sizes: dict[int, float] = {}  # MB each model added to the process when it loaded
        self._shared = Shared()  # one codec decoder where the models' codecs are the same, one engine thread
        self._closed = False

    # --- the slot's Loader ---
    def request(self, index: int) -> None:
        """Start loading model `index` (on the event loop; returns at once)."""
        if self._closed or index in self.slot.services or index in self._loading or index in self._failures:
            return
        self._loading.add(index)
        victims = self._make_room(index)
        threading.Thread(target=self._load, args=(index, victims), name=f"qwen3tts-load-{index}",
                         daemon=True).start()

    def failure(self, index: int) -> BaseException | None:
        return self._failures.get(index)

    # --- start and stop ---
    async def preload(self) -> None:
        """Load the models marked preload, in order. With one model its failure is raised (the
        server cannot serve); with several it is logged, and only its voices fail."""
        for plan in self.plans:
            if not plan.entry.preload:
                log.info("model %d (%s) loads on its first request", plan.index, plan.entry.source)
                continue
            self.request(plan.index)
            while plan.index in self._loading:
                await asyncio.sleep(0.05)
            if (error := self._failures.get(plan.index)) is not None and len(self.plans) == 1:
                raise error

    def close(self) -> list[Service]:
        """No more loads; the loaded services, for the caller to close."""
        self._closed = True
        services = list(self.slot.services.values())
        self.slot.services.clear()
        return services

    # --- loading and unloading ---
    def _load(self, index: int, victims: list[Service]) -> None:
        plan = self.plans[index]
        try:
            with self._one_at_a_time:
                for victim in victims:
                    victim.engine.close()
                before = Resident.now().mb
                service = build_service(self.config, plan, len(self.plans), self._shared)
                try:
                    service = self.attach(service) if self.attach is not None else service
                except BaseException:
                    service.engine.close()
                    raise
                self._sizes[index] = Resident.now().mb - before
        except BaseException as e:
            log.error("model %d (%s) could not be loaded: %s", index, plan.entry.source, e)
            self._call(self._failed, index, e)
            return
        self._call(self._loaded, service)

    def _call(self, fn: Callable[..., None], *args: object) -> None:
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: the server stopped meanwhile
            if args and isinstance(args[0], Service):
                args[0].engine.close()

    def _loaded(self, service: Service) -> None:
        self._loading.discard(service.index)
        if self._closed or self.slot.stopping:
            threading.Thread(target=service.engine.close, daemon=True).start()
            return
        self.slot.load(service)

    def _failed(self, index: int, error: BaseException) -> None:
        self._loading.discard(index)
        self._failures[index] = error

    def _make_room(self, index: int) -> list[Service]:
        """The idle models to unload, least recently used first, so that loading `index` stays
        within model.memory_budget_mb (nothing when no budget is set). Taken out of the slot
        here, on the event loop, so no request starts on them; closed by the loading thread."""
        budget = self.config.model.memory_budget_mb
        if budget is None:
            return []
        need = self._sizes.get(index) or self._files_mb(self.plans[index])
        victims: list[Service] = []
        used = Resident.now().mb
        idle = sorted((i for i in self.slot.services if self.slot.idle(i)),
                      key=lambda i: self.slot.last_used.get(i, 0.0))
        for i in idle:
            if used + need <= budget:
                break
            service = self.slot.unload(i)
            if service is not None:
                victims.append(service)
                used -= self._sizes.get(i, 0.0)
                log.info("unloading model %d (%s, idle) to load model %d within model.memory_budget_mb %d",
                         i, self.plans[i].entry.source, index, budget)
        if used + need > budget:
            log.warning("loading model %d (~%.0f MB) takes the server beyond model.memory_budget_mb %d MB "
                        "(~%.0f MB in use, no idle model left to unload)", index, need, budget, used)
        return victims

    def _files_mb(self, plan: ModelPlan) -> float:
        """A first guess at a model's memory before it has ever loaded: its converted weights."""
        source = Path(plan.entry.source).expanduser()
        weights = plan.entry.weights or self.config.model.weights
        try:
            folders = [source] if source.is_dir() else [  # auto: whichever of its formats is on disk
                conversion_dir(plan.entry.source, self.config.model.data_path, w, self.config.model.codec_weights)
                for w in formats(weights)]
            return max(sum(f.stat().st_size for f in folder.glob("*.bin")) / 2**20 for folder in folders)
        except (OSError, ValueError):
            return 0.0
