"""wyoming-qwen3tts: the Wyoming text-to-speech server (also `python -m wyoming_qwen3tts`)."""
from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from functools import partial
from pathlib import Path
from urllib.parse import urlparse

import openvino as ov
from wyoming.event import async_get_stdin, async_get_stdout
from wyoming.server import AsyncServer

from .. import __version__
from ..config import WEIGHT_FORMATS, ConfigError, ServerConfig, VoiceConfig, apply_overrides, load_config
from ..engine.clone import ClonePrompt, CloneError, Cloner
from ..engine.devices import GRAPHS, KV_PRECISIONS, PRECISION_SETTINGS, describe_devices, place
from ..engine.model import LoadedModel
from ..engine.sampling import SamplingParams
from ..engine.scheduler import Scheduler
from ..engine.stream import EngineError
from .handler import Service, ServiceSlot, TtsHandler
from .models import ModelSourceError, prepare_model
from .voices import Catalogue, CatalogueError, build_info

log = logging.getLogger("wyoming-qwen3tts")

WARM_UP_S = 300.0  # a voice's first words, which may prime the decoder with a long reference


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Flags default to None: a flag given overrides config.yaml, one not given keeps it."""
    parser = argparse.ArgumentParser(prog="wyoming-qwen3tts", description=__doc__)
    parser.add_argument("--config", type=Path, help="config.yaml (default: built-in defaults)")
    parser.add_argument("--model", help="converted directory, Hugging Face checkpoint directory, or hub repo id")
    parser.add_argument("--data-dir", help="where checkpoints and repo ids are converted and kept")
    parser.add_argument("--weights", choices=WEIGHT_FORMATS,
                        help="weight format of those conversions (int4: the fast preset)")
    parser.add_argument("--uri", help="tcp://HOST:PORT, unix://PATH or stdio:// (default tcp://0.0.0.0:10200)")
    parser.add_argument("--voice", help="default voice")
    parser.add_argument("--device", help="OpenVINO device of every graph (CPU, GPU, NPU, AUTO)")
    for graph in GRAPHS:
        parser.add_argument(f"--device-{graph}", help=f"device of the {graph} only (overrides --device)")
    parser.add_argument("--list-devices", action="store_true", help="print what OpenVINO sees, what precision "
                        "auto picks on each device, and where and in which precision each graph would run, then exit")
    parser.add_argument("--threads", type=int, help="inference threads per graph")
    parser.add_argument("--precision", choices=PRECISION_SETTINGS, help="inference precision (default auto: each "
                        "device's fastest native one; f32: exact)")
    parser.add_argument("--kv-precision", choices=KV_PRECISIONS)
    parser.add_argument("--max-batch", type=int, help="requests generated together")
    parser.add_argument("--runner", choices=("native", "python"), help="step loop (default native)")
    parser.add_argument("--greedy", action="store_true", default=None, help="greedy decoding (deterministic)")
    parser.add_argument("--seed", type=int, help="seed for sampling")
    parser.add_argument("--first-chunk", type=int, help="frames in a stream's first codec call")
    parser.add_argument("--steady-chunk", type=int, help="frames per codec call after the first")
    parser.add_argument("--samples-per-chunk", type=int, help="samples per Wyoming audio-chunk event")
    parser.add_argument("--zeroconf", nargs="?", const="qwen3tts", help="announce over mDNS (optional name)")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--version", action="version", version=__version__)
    return parser.parse_args(argv)


def requested_devices(config: ServerConfig) -> dict[str, str]:
    return {graph: getattr(config.devices, graph) for graph in GRAPHS}


def build_service(config: ServerConfig) -> Service:
    """Convert if needed, compile, start the engine, warm it up."""
    devices = place(requested_devices(config), ov.Core().available_devices)
    model_dir = prepare_model(config.model.source, config.model.data_path, config.model.weights)
    engine_config = config.engine
    model = LoadedModel(model_dir, devices["talker"], config.precision.inference, config.precision.kv_cache,
                        chunks=(engine_config.first_chunk, engine_config.steady_chunk), threads=config.devices.threads,
                        subcode_device=devices["subcode"], decoder_device=devices["decoder"],
                        runner=engine_config.runner, cache_dir=config.model.data_path / "ov-cache")
    params = SamplingParams.from_defaults(model.spec.generation, seed=config.server.seed)
    params = params.greedy() if config.server.greedy else params
    engine = Scheduler(model, engine_config, defaults=params).start()
    cloner = Cloner(model) if model.spec.model_type == "base" else None
    try:
        clone = partial(prepare_clone, cloner, engine, params) if cloner else None
        catalogue = Catalogue(model.spec, config.voices, config.server.default_voice, clone)
        if cloner:
            cloner.close()  # the encoders are needed no more
        for problem in catalogue.errors:
            log.warning("voice skipped: %s", problem)
        default = catalogue.default
        if default.clone is None or default.clone.ref_codes is None:  # in-context clones spoke already
            engine.submit(default.request("Hello.", default.default_language), params,
                          max_frames=2).read_all(WARM_UP_S)
    except BaseException:
        engine.close()
        raise
    log.info("warmed up; %d voices: %s", len(catalogue.voices), ", ".join(v.name for v in catalogue.voices))
    server = config.server
    return Service(engine, catalogue, build_info(catalogue, __version__), params, server.samples_per_chunk,
                   server.max_text_chars, server.max_sentence_chars)


def prepare_clone(cloner: Cloner, engine: Scheduler, params: SamplingParams, voice: VoiceConfig) -> ClonePrompt:
    """A clone voice of config.yaml, ready to serve: the recording through the encoders (or
    from their cache), and an in-context clone's first words, which prime the decoder state
    the runner keeps for it. Any failure is a CloneError: the catalogue skips the voice."""
    where = f"voice {voice.name!r}"
    prompt = cloner.prompt(voice.ref_audio, voice.ref_text, voice.x_vector_only, where=where)
    if prompt.ref_codes is not None:
        try:
            engine.submit(prompt.request("Hello.", "auto"), params, max_frames=2).read_all(WARM_UP_S)
        except (EngineError, ValueError, TimeoutError) as e:
            raise CloneError(f"{where}: the first synthesis failed: {e}") from None
    return prompt


async def serve(config: ServerConfig) -> None:
    """Listen at once (describe is answered while the model loads: the first start downloads
    and converts it), load, then serve until stopped (SIGTERM). The engine is closed while
    the event loop still runs, so the requests it aborts can end their streams on it."""
    uri = config.server.uri
    slot = ServiceSlot(build_info(None, __version__, loading=config.model.source))
    try:
        if uri.startswith("stdio://"):  # our own read loop: bounded reads, and the end of input
            slot.service = await asyncio.to_thread(build_service, config)  # finishes replies
            await TtsHandler(slot, await async_get_stdin(), await async_get_stdout()).run()
            return
        server = AsyncServer.from_uri(uri)
        serving = asyncio.create_task(server.run(partial(TtsHandler, slot)))
        loading = asyncio.create_task(asyncio.to_thread(build_service, config))
        await asyncio.wait({serving, loading}, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():  # could not listen (port taken?) or stopped while loading
            loading.add_done_callback(_close_when_loaded)
            return serving.result()
        slot.service = loading.result()
        slot.info = slot.service.info
        if config.server.zeroconf:
            await announce(uri, config.server.zeroconf)
        log.info("ready on %s", uri)
        await serving
    finally:
        if slot.service is not None:
            await asyncio.to_thread(slot.service.engine.close)


def _close_when_loaded(loading: asyncio.Task) -> None:
    if not loading.cancelled() and loading.exception() is None:
        loading.result().engine.close()


async def announce(uri: str, name: str) -> None:
    """mDNS `_wyoming._tcp` with the machine's LAN address (the library detects it when the
    server listens on every interface; 0.0.0.0 must never be advertised)."""
    parsed = urlparse(uri)
    if parsed.scheme != "tcp":
        raise ConfigError(f"--zeroconf needs a tcp:// uri, not {uri}")
    try:
        from wyoming.zeroconf import HomeAssistantZeroconf
    except ImportError:
        raise ConfigError("--zeroconf needs the zeroconf package: pip install 'wyoming-qwen3tts[zeroconf]'") from None
    host = parsed.hostname if parsed.hostname not in (None, "", "0.0.0.0", "::") else None
    try:
        zeroconf = HomeAssistantZeroconf(port=parsed.port or 10200, name=name, host=host)
    except OSError as e:  # no route to the mDNS group: the LAN address cannot be detected
        raise ConfigError(f"--zeroconf: cannot detect this machine's LAN address ({e}); "
                          f"listen on it explicitly: --uri tcp://<LAN address>:{parsed.port or 10200}") from None
    if zeroconf.host in ("0.0.0.0", ""):
        raise ConfigError("--zeroconf: refusing to announce 0.0.0.0; give --uri tcp://<LAN address>:PORT")
    await zeroconf.register_server()
    log.info("announced %s._wyoming._tcp.local. at %s:%s", name, zeroconf.host, zeroconf.port)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = apply_overrides(load_config(args.config), model=args.model, data_dir=args.data_dir,
                                 weights=args.weights, device=args.device, threads=args.threads,
                                 precision=args.precision, kv_precision=args.kv_precision, max_batch=args.max_batch,
                                 runner=args.runner,
                                 first_chunk=args.first_chunk, steady_chunk=args.steady_chunk, uri=args.uri,
                                 zeroconf=args.zeroconf, samples_per_chunk=args.samples_per_chunk,
                                 greedy=args.greedy, seed=args.seed, voice=args.voice,
                                 talker_device=args.device_talker, subcode_device=args.device_subcode,
                                 decoder_device=args.device_decoder)
        if args.list_devices:
            print(describe_devices(ov.Core(), requested_devices(config),  # noqa: T201 - the command's output
                                   config.precision.inference))
            return 0
        asyncio.run(serve(config))
    except (ConfigError, ModelSourceError, CatalogueError, ValueError, EngineError, TimeoutError, OSError) as e:
        log.error("%s", e)  # bad settings or model, a port that is taken, a failed warm-up
        return 2
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
