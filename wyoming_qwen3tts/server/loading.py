"""Start-up: the voice list first (from the model's config.json, in seconds), then the model
(download, conversion, compilation, engine, warm-up), each phase logged with its time."""
from __future__ import annotations

import contextlib
import gc
import json
import logging
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import openvino as ov

from .. import __version__
from ..clone.cloner import CloneError, ClonePrompt, Cloner
from ..config import CODEC_FORMATS, ModelEntry, ServerConfig, VoiceConfig
from ..engine.decoders import Decoders
from ..engine.devices import GRAPHS, place
from ..engine.group import EngineGroup
from ..engine.isa_cap import onednn_cap
from ..engine.memory import LoadMemory, Resident
from ..engine.open import Placement, open_engine
from ..engine.sampling import SamplingParams
from ..engine.scheduler import Scheduler, return_freed_memory
from ..engine.stream import EngineError
from ..hub import import_hub
from ..model.manifest import MANIFEST, ConvertedModelError, older_format, read_converted
from ..model.spec import ConfigError as SpecError
from ..model.spec import VoiceSpec, parse_voice_spec
from .directory import Directory, ModelPlan, plan_models
from .models import ModelSourceError, conversion_dir, prepare_model
from .service import Service
from .voices import Catalogue, build_info
from .weights_choice import (
    AUTO,
    CANDIDATES,
    MEASURE_TEXT,
    RECORD,
    Records,
    choose,
    cpu_signature,
    formats,
    measure_stream,
)

log = logging.getLogger("wyoming-qwen3tts")

WARM_UPS = 3  # the engine's cost estimates are medians of recent calls (engine/pacing.py), and a first call is cold
WARM_UP_S = 300.0  # a voice's first words, which may prime the decoder with a long reference


@contextlib.contextmanager
def phase(what: str) -> Iterator[None]:
    """Log how long a start-up phase took."""
    start = time.monotonic()
    yield
    log.info("%s: %.1f s", what, time.monotonic() - start)


def download_config(repo: str, revision: str | None) -> Path:
    """A hub checkpoint's config.json alone (from the Hugging Face cache when it is there)."""
    try:
        hf_hub_download = import_hub().hf_hub_download
    except ImportError:
        raise ModelSourceError(f"downloading {repo} needs huggingface_hub: "
                               f"pip install 'wyoming-qwen3tts[convert]'") from None
    return Path(hf_hub_download(repo, "config.json", revision=revision))


def config_file(source: str, data_dir: Path, weights: str) -> Path:
    """The config.json that says which voices `source` has: a directory's own (converted or
    checkpoint), an earlier conversion's (with any codec: its voices are the same), or the hub
    checkpoint's (downloaded alone)."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path / "config.json"
    for each in formats(weights):
        for codec in CODEC_FORMATS:
            converted = conversion_dir(source, data_dir, each, codec) / "config.json"  # raises for a bad source
            if converted.is_file():
                return converted
    repo, _, revision = source.partition("@")
    return download_config(repo, revision or None)


def read_voice_spec(entry: ModelEntry, data_dir: Path) -> VoiceSpec | None:
    """A model's voice spec from its config.json, or None when that cannot be had now (the
    hub unreachable: loading the model says why, or succeeds from a cache)."""
    try:
        file = config_file(entry.source, data_dir, entry.weights or AUTO)
        return parse_voice_spec(json.loads(file.read_text(encoding="utf-8")), where=str(file))
    except ModelSourceError:
        raise
    except (OSError, ValueError, SpecError) as e:  # huggingface_hub's errors are OSErrors or ValueErrors
        log.warning("the voices of %s are not known before it is loaded (%s: %s); describe is not "
                    "answered until then", entry.source, type(e).__name__, e)
        return None


def plan(config: ServerConfig) -> list[ModelPlan]:
    """Which model serves which voice, from each model's config.json (server/directory.py)."""
    with phase("voice list from the models' config.json"):
        specs = [read_voice_spec(entry, config.model.data_path) for entry in config.model_entries]
        return plan_models(config, specs)


def catalogue_of(plan: ModelPlan, config: ServerConfig, several: bool,
                 clone: Callable[[VoiceConfig], ClonePrompt] | None = None, preview: bool = False) -> Catalogue:
    """One model's voices; with several models the directory checks the default voice."""
    assert plan.spec is not None
    return Catalogue(plan.spec, plan.voices, None if several else config.server.default_voice, clone,
                     preview=preview, renames=plan.renames, may_be_empty=several)


def preview_directory(config: ServerConfig, plans: list[ModelPlan]) -> Directory | None:
    """The voices the server will offer, before any model is loaded (None: not known yet).
    A configuration that cannot serve any voice fails here, before minutes of download."""
    if any(p.spec is None for p in plans):
        return None
    several = len(plans) > 1
    return Directory({p.index: catalogue_of(p, config, several, preview=True) for p in plans},
                     config.server.default_voice)


def requested_devices(config: ServerConfig) -> dict[str, str]:
    return {graph: getattr(config.devices, graph) for graph in GRAPHS}


@dataclass
class Shared:
    """What the models of one server share (docs/ARCHITECTURE.md, "Several models in one
    process"): the compiled codec decoder where their codecs are the same, and one engine
    thread stepping them all."""

    decoders: Decoders = field(default_factory=Decoders)
    group: EngineGroup = field(default_factory=EngineGroup)


def build_service(config: ServerConfig, plan: ModelPlan | None = None, models: int = 1,
                  shared: Shared | None = None) -> Service:
    """Convert if needed, compile, start the engine, prepare the voices, warm up: one model
    (`plan`; None: config's only model), with a `models`-th of the KV cache budget, sharing
    what `shared` holds with the other models. Weights `auto` picks the format by measuring
    (server/weights_choice.py)."""
    if plan is None:
        (plan,) = plan_models(config, [read_voice_spec(config.model_entries[0], config.model.data_path)])
    trial = ServiceTrial(config, plan, models, shared)
    source = plan.entry.source
    weights = plan.entry.weights or config.model.weights
    if weights != AUTO:
        return trial.load(weights)
    if (Path(source).expanduser() / MANIFEST).is_file():
        log.info("auto: %s is a conversion; used as it is", source)
        return trial.load(CANDIDATES[0])
    key = plan.spec.model_size if plan.spec is not None else source
    signature = cpu_signature(config.devices.threads, ov.get_version(), {
        "precision": config.precision.inference, "kv_cache": config.precision.kv_cache,
        "backend": config.engine.backend, "kernels": config.engine.kernels, "onednn_cap": onednn_cap(),
        "codec_weights": config.model.codec_weights,
        **requested_devices(config)})
    records = Records(config.model.data_path / "converted" / RECORD)
    service, _ = choose(key, source, signature, records, trial, __version__)
    return service


class ServiceTrial:
    """weights_choice.Trial over services: one format's conversion, service and measurement."""

    def __init__(self, config: ServerConfig, plan: ModelPlan, models: int, shared: Shared | None) -> None:
        self.config, self.plan, self.models, self.shared = config, plan, models, shared

    def _dir(self, weights: str) -> Path:
        return conversion_dir(self.plan.entry.source, self.config.model.data_path, weights,
                              self.config.model.codec_weights)

    def present(self, weights: str) -> bool:
        try:
            manifest, _ = read_converted(self._dir(weights))
        except ConvertedModelError:
            return False
        return older_format(manifest) is None

    def load(self, weights: str) -> Service:
        gc.collect()  # what is left of a model closed before (its Python side, in cycles) goes first
        return_freed_memory()
        with phase(f"model files of {self.plan.entry.source} (download and conversion when needed)"):
            model_dir = prepare_model(self.plan.entry.source, self.config.model.data_path, weights,
                                      self.config.model.codec_weights)
        return open_service(self.config, self.plan, self.models, self.shared, model_dir)

    def measure(self, service: Service) -> float | None:
        default = service.catalogue.default
        if default is None:
            return None
        try:
            with phase("auto: measuring one stream"):
                return measure_stream(service.engine, default.request(MEASURE_TEXT, default.default_language),
                                      service.params)
        except (EngineError, ValueError) as e:  # the model serves; only its figure is missing
            log.warning("auto: measuring with voice %s failed: %s", default.name, e)
            return None

    def close(self, service: Service) -> None:
        before = Resident.now()
        service.engine.close()
        return_freed_memory()
        log.info("auto: closed the engine measured: %s", LoadMemory(before, Resident.now()))

    def delete(self, weights: str) -> None:
        folder = self._dir(weights)
        log.info("auto: deleting the %s conversion in %s (not chosen)", weights, folder)
        for each in [folder, *folder.parent.glob(f"{folder.name}.partial-*")]:  # and what a killed converter left
            shutil.rmtree(each, ignore_errors=True)


def open_service(config: ServerConfig, plan: ModelPlan, models: int, shared: Shared | None,
                 model_dir: Path) -> Service:
    """The service of a converted model directory (build_service's work after the files)."""
    start, resident = time.monotonic(), Resident.now()
    devices = place(requested_devices(config), ov.Core().available_devices)
    placement = Placement(devices["talker"], devices["subcode"], devices["decoder"], config.precision.inference,
                          config.precision.kv_cache, config.devices.threads, config.model.data_path / "ov-cache")
    engine_config = config.engine if models == 1 else replace(
        config.engine, kv_cache_mb=max(1, config.engine.kv_cache_mb // models),
        kv_blocks=None if config.engine.kv_blocks is None else max(1, config.engine.kv_blocks // models))
    with phase("compilation"):
        engine = open_engine(model_dir, engine_config, placement, seed=config.server.seed,
                             greedy=config.server.greedy, decoders=shared.decoders if shared else None,
                             group=shared.group if shared else None).start()
    model, params = engine.model, engine.defaults
    if plan.spec is None:
        plan = replace(plan, spec=model.spec)
    cloner = Cloner(model) if model.spec.model_type == "base" else None
    try:
        with phase("voices"):
            clone = partial(prepare_clone, cloner, engine, params) if cloner else None
            catalogue = catalogue_of(plan, config, models > 1, clone)
            if cloner:
                cloner.close()  # the encoders are needed no more
        for problem in catalogue.errors:
            log.warning("voice skipped: %s", problem)
        default = catalogue.default
        if default is not None and (default.clone is None or default.clone.ref_codes is None):
            with phase("warm-up"):  # (in-context clones spoke already)
                for _ in range(WARM_UPS):
                    engine.submit(default.request("Hello.", default.default_language), params,
                                  max_frames=2).read_all(WARM_UP_S)
    except BaseException:
        engine.close()
        raise
    log.info("model %d (%s) loaded in %.1f s, %s; %d voices: %s", plan.index, catalogue.label,
             time.monotonic() - start, LoadMemory(resident, Resident.now()), len(catalogue.voices),
             ", ".join(v.name for v in catalogue.voices) or "none yet")
    return Service(engine, catalogue, build_info(catalogue, __version__), params, config.server, plan.index)


def build_services(config: ServerConfig, attach: Callable[[Service], Service] | None = None) -> list[Service]:
    """Every model of `config`, loaded now, in order (stdio serving and the benchmark; the
    server loads through server/model_set.py). attach: what each loaded service becomes
    (the voice lab adds its saved voices)."""
    plans, shared = plan(config), Shared()
    services: list[Service] = []
    try:
        for each in plans:
            service = build_service(config, each, len(plans), shared)
            services.append(service)
            if attach is not None:
                services[-1] = attach(service)
    except BaseException:
        for service in services:
            service.engine.close()
        raise
    return services


def prepare_clone(cloner: Cloner, engine: Scheduler, params: SamplingParams, voice: VoiceConfig) -> ClonePrompt:
    """A clone voice of config.yaml, ready to serve: the recording through the encoders (or
    from their cache), and an in-context clone's first words, which prime the decoder state
    the runner keeps for it. Any failure is a CloneError: the catalogue skips the voice."""
    where = f"voice {voice.name!r}"
    assert voice.ref_audio is not None  # the catalogue clones only the voices with a recording
    prompt = cloner.prompt(voice.ref_audio, voice.ref_text, voice.x_vector_only, where=where)
    if prompt.ref_codes is not None:
        try:
            engine.submit(prompt.request("Hello.", "auto"), params, max_frames=2).read_all(WARM_UP_S)
        except (EngineError, ValueError, TimeoutError) as e:
            raise CloneError(f"{where}: the first synthesis failed: {e}") from None
    return prompt
