"""One way to open an engine on a converted directory: the server, `qwen3tts-say` and the
benchmark all come through `open_engine`, so the runner and the codec schedule are stated
once (in EngineConfig) and the model is compiled for exactly what the scheduler will run."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from .config import EngineConfig
from .decoders import Decoders
from .group import EngineGroup
from .loaded_model import LoadedModel
from .memory import LoadMemory, Resident
from .sampling import SamplingParams
from .scheduler import Scheduler
from .step import ChunkSchedule

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    """Where and in which precision the graphs run (docs/ARCHITECTURE.md, "Devices and
    precision"): the talker's device (and the others' unless given), the inference
    precision setting, the KV cache's, threads per graph, OpenVINO's compiled-blob cache."""

    device: str = "CPU"
    subcode_device: str | None = None
    decoder_device: str | None = None
    precision: str = "f32"
    kv_precision: str = "u8"
    threads: int | None = None
    cache_dir: Path | None = None


def open_engine(model_dir: str | Path, config: EngineConfig, placement: Placement = Placement(), *,
                seed: int | None = None, greedy: bool = False, offline: bool = False,
                decoders: Decoders | None = None, group: EngineGroup | None = None) -> Scheduler:
    """Compile `model_dir` for `config`'s runner and chunk schedule and return its scheduler
    (not started: `start()`, or use it as a context manager). seed, greedy: the sampling of
    requests that bring none (`Scheduler.defaults`; otherwise the model's generation config).
    offline: no audio while generating; the caller decodes the codes
    (LoadedModel.decode_offline). decoders, group: for several models in one process, the
    registry of compiled codec decoders they share (engine/decoders.py) and the thread that
    steps them in turn (engine/group.py); pass the same ones to every model. The resident
    memory the model added is logged and kept in `Scheduler.load_memory`. Raises ValueError
    for a KV cache precision the talker's device cannot pair with its precision."""
    before = Resident.now()
    schedule = ChunkSchedule(config.first_chunk, config.steady_chunk, offline)
    model = LoadedModel(model_dir, placement.device, placement.precision, placement.kv_precision,
                        threads=placement.threads, subcode_device=placement.subcode_device,
                        decoder_device=placement.decoder_device, cache_dir=placement.cache_dir)
    defaults = SamplingParams.from_defaults(model.spec.generation, seed=seed)
    engine = Scheduler(model, config, defaults=defaults.greedy() if greedy else defaults, schedule=schedule,
                       decoders=decoders, group=group)
    engine.load_memory = LoadMemory(before, Resident.now())
    log.info("opened %s: %s", model.dir, engine.load_memory)
    return engine
