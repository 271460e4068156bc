"""wyoming-qwen3tts: the Wyoming text-to-speech server (also `python -m wyoming_qwen3tts`)."""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse

import openvino as ov
from wyoming.event import async_get_stdin, async_get_stdout
from wyoming.server import AsyncServer

from .. import __version__
from ..backend_flags import add_backend_flags
from ..config import (
    CODEC_FORMATS,
    NORMALIZE_TEXT,
    OVERRIDES,
    TEXT_FEEDING,
    WEIGHT_SETTINGS,
    ConfigError,
    ServerConfig,
    ServerSettings,
    apply_overrides,
    load_config,
)
from ..engine.config import TEXT_LAYOUTS
from ..engine.devices import GRAPHS, KV_PRECISIONS, PRECISION_SETTINGS, describe_devices
from ..engine.native import kernel_isas
from ..engine.stream import EngineError
from ..normalize import warm_up as warm_up_normalizer
from .ha_refresh import HaRefresher, ha_token
from .handler import Service, ServiceSlot, TtsHandler
from .http_api import HttpServer, build_app, start_http
from .loading import build_service, build_services, plan, requested_devices
from .model_set import ModelSet
from .models import ModelSourceError
from .speech import SpeechError
from .transcribe import AsrClient
from .voice_lab import VoiceLab
from .voices import CatalogueError

__all__ = ["build_service", "main", "serve"]

log = logging.getLogger("wyoming-qwen3tts")
T = TypeVar("T")
HTTP_TOKEN_ENV = "QWEN3TTS_HTTP_TOKEN"  # server.http_token from the environment (docs/HTTP.md)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Flags default to None: a flag given overrides config.yaml, one not given keeps it."""
    parser = argparse.ArgumentParser(prog="wyoming-qwen3tts", description=__doc__)
    parser.add_argument("--config", type=Path, help="config.yaml (default: built-in defaults)")
    parser.add_argument("--model", action="append", help="converted directory, Hugging Face checkpoint directory, or "
                        "hub repo id; give it again to serve several models together (replaces config.yaml's)")
    parser.add_argument("--data-dir", help="where checkpoints and repo ids are converted and kept")
    parser.add_argument("--weights", choices=WEIGHT_SETTINGS,
                        help="weight format of those conversions (default auto: the most accurate one that is real "
                        "time on this CPU, measured at the first start; int4: the fast preset)")
    parser.add_argument("--codec-weights", choices=CODEC_FORMATS,
                        help="the codec decoder's weights in those conversions (default fp32: exact; int8: its last "
                        "blocks' convolutions in INT8, about twice as fast on a CPU without BF16, not exact)")
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
    add_backend_flags(parser)
    parser.add_argument("--greedy", action="store_true", default=None, help="greedy decoding (deterministic)")
    parser.add_argument("--seed", type=int, help="seed for sampling")
    parser.add_argument("--first-chunk", type=int, help="frames in a stream's first codec call")
    parser.add_argument("--steady-chunk", type=int, help="frames per codec call after the first")
    parser.add_argument("--text-layout", choices=TEXT_LAYOUTS, help="where a request's text goes in the prompt: "
                        "auto (the model type's official default), streaming (one text token before the first "
                        "frame, the rest one per frame: first audio sooner) or non_streaming")
    parser.add_argument("--codec-lead", action=argparse.BooleanOptionalAction, default=None,
                        help="decode a stream's first 40 ms ahead of the rest of its first frame (default off: "
                        "4-10 ms sooner for one more compiled decoder)")
    parser.add_argument("--samples-per-chunk", type=int, help="samples per Wyoming audio-chunk event")
    parser.add_argument("--zeroconf", nargs="?", const="qwen3tts", help="announce over mDNS (optional name)")
    parser.add_argument("--profile", action="store_true", default=None, help="log each request's time from arrival "
                        "to its first audio, step by step, and the medians at shutdown")
    parser.add_argument("--text-feeding", choices=TEXT_FEEDING, help="streamed text: word (a sentence starts with its "
                        "first words; default) or sentence (waits for each sentence's end)")
    parser.add_argument("--normalize-text", choices=NORMALIZE_TEXT, help="read numbers, times, dates, units and "
                        "money out in each sentence's language (auto, the default; docs/TEXT.md) or speak the text "
                        "as written (off)")
    parser.add_argument("--holdback", type=float, help="streamed requests: most seconds a sentence's audio start is "
                        "held against running dry (default 0.5; one-shot requests are never held)")
    parser.add_argument("--http", help="HOST:PORT of the voice lab page and its API (docs/HTTP.md; default off)")
    parser.add_argument("--http-token", help="token the HTTP side requires (needed off loopback; env "
                        f"{HTTP_TOKEN_ENV} keeps it out of the process list)")
    parser.add_argument("--http-ingress", action="store_true", default=None,
                        help="answer HTTP only from Home Assistant's ingress proxy (the add-on)")
    parser.add_argument("--asr", help="tcp://HOST:PORT of a Wyoming speech-to-text server for transcripts")
    parser.add_argument("--ha-url", help="Home Assistant's URL, to reload its Wyoming entry when voices change "
                        "(token: server.ha_token, or env SUPERVISOR_TOKEN / HA_TOKEN)")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--version", action="version", version=__version__)
    return parser.parse_args(argv)


SHUTDOWN_GRACE_S = 5.0  # on SIGTERM/SIGINT, what in-flight requests get to finish (Docker waits 10 s)
ENDING_S = 2.0  # then what the cancelled ones get to send their ends


def in_daemon_thread(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """`fn(*args)` on a daemon thread: a stop during a download or a compilation that cannot
    be interrupted does not wait for it (asyncio.to_thread's threads are joined at exit)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def succeed(result: T) -> None:
        if not future.done():
            future.set_result(result)

    def fail(error: BaseException) -> None:
        if not future.done():
            future.set_exception(error)

    def run() -> None:
        try:
            result = fn(*args)
        except BaseException as e:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server stopped meanwhile
                loop.call_soon_threadsafe(fail, e)
            return
        try:
            loop.call_soon_threadsafe(succeed, result)
        except RuntimeError:  # the loop is closed: the server stopped meanwhile
            if isinstance(result, Service):
                result.engine.close()

    threading.Thread(target=run, name=f"qwen3tts-{fn.__name__}", daemon=True).start()
    future.add_done_callback(lambda f: f.cancelled() or f.exception())  # abandoned on a stop: not "never retrieved"
    return future


async def either(*futures: asyncio.Future[Any]) -> None:
    """Until the first of `futures` is done."""
    await asyncio.wait(futures, return_when=asyncio.FIRST_COMPLETED)


def stop_signal() -> asyncio.Future[str]:
    """Resolves with the name of the first SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    stopped: asyncio.Future[str] = loop.create_future()

    def stop(name: str) -> None:
        if not stopped.done():
            stopped.set_result(name)

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop, sig.name)
    return stopped


async def serve(config: ServerConfig) -> None:
    """Listen at once, learn the voice list (from the models' config.json: seconds), load the
    models (minutes on a first start: download and conversion), then serve until SIGTERM or
    SIGINT. describe is answered as soon as the voice list is known; requests that arrive
    while their model loads wait for it (server.loading_wait). The engines are closed while
    the event loop still runs, so the requests they abort can end their streams on it."""
    start, uri = time.monotonic(), config.server.uri
    slot = ServiceSlot(settings=config.server)
    if config.server.normalize_text == "auto":
        warm_up_normalizer()  # the language detector loads while the models do
    refresher = ha_refresher(config.server)
    lab = VoiceLab(slot, config, refresher.request if refresher is not None else None)
    if uri.startswith("stdio://"):  # our own read loop: bounded reads, and the end of input
        lab.prepare(await asyncio.to_thread(plan, config))
        for service in await asyncio.to_thread(build_services, config, lab.attach):
            slot.load(service)  # finishes replies
        try:
            await TtsHandler(slot, await async_get_stdin(), await async_get_stdout()).run()
        finally:
            for service in slot.services.values():
                await asyncio.to_thread(service.engine.close)
        return
    stopped = stop_signal()
    server = AsyncServer.from_uri(uri)
    await server.start(partial(TtsHandler, slot))
    log.info("listening on %s", uri)
    models: ModelSet | None = None
    http = None
    try:
        if config.server.http is not None:
            asr = AsrClient(config.server.asr) if config.server.asr else None
            http = await start_http(build_app(slot, config.server, lab, asr), config.server.http)
        work = in_daemon_thread(plan, config)
        await either(work, stopped)
        if stopped.done():
            log.info("%s while reading the voice list: abandoning it", stopped.result())
            return
        plans = work.result()
        if (directory := lab.prepare(plans)) is not None:
            slot.publish(directory)
        models = slot.loader = ModelSet(config, plans, slot, asyncio.get_running_loop(), lab.attach)
        loading = asyncio.ensure_future(models.preload())
        await either(loading, stopped)
        if stopped.done():
            loading.cancel()
            log.info("%s while loading the models: abandoning it", stopped.result())
            return
        loading.result()
        if not slot.services and all(p.entry.preload for p in plans):
            raise EngineError("no model could be loaded (see the errors above)")
        if config.server.zeroconf:
            await announce(uri, config.server.zeroconf)
        log.info("ready on %s, %.1f s after start", uri, time.monotonic() - start)
        await stopped
    finally:
        await shutdown(server, slot, stopped.result() if stopped.done() else "an error", models, http)
        if refresher is not None:
            await refresher.close()


def ha_refresher(settings: ServerSettings) -> HaRefresher | None:
    """Home Assistant's refresh after voice changes, when server.ha_url and a token are given."""
    if settings.ha_url is None:
        return None
    token = ha_token(settings.ha_token)
    if token is None:
        log.warning("server.ha_url is set but no token (server.ha_token, SUPERVISOR_TOKEN or HA_TOKEN): "
                    "Home Assistant will not be asked to reload after voice changes")
        return None
    return HaRefresher(settings.ha_url, token)


def stop_listening(server: AsyncServer) -> None:
    """Close the listening socket, keeping the open connections. The wyoming library's stop()
    does both, and only after telling every handler to stop; its TCP and Unix servers keep the
    asyncio server as `_server`."""
    listener = getattr(server, "_server", None)
    if isinstance(listener, asyncio.AbstractServer):
        listener.close()


async def shutdown(server: AsyncServer, slot: ServiceSlot, why: str, models: ModelSet | None = None,
                   http: HttpServer | None = None) -> None:
    """Stop listening, refuse new requests on open connections, give those in flight
    SHUTDOWN_GRACE_S to finish, cancel the rest (each still ends with an error and its end
    marker), close the connections and the engines. Refusing new connections at once lets a
    load balancer send them elsewhere (docs/HAPROXY.md) instead of to a server that only says
    ShuttingDown."""
    stop_listening(server)
    slot.stopping = True
    in_flight = slot.in_flight()
    if in_flight:
        log.info("stopping on %s: %d requests in flight, waiting up to %.0f s for them", why, len(in_flight),
                 SHUTDOWN_GRACE_S)
    else:
        log.info("stopping on %s: no request in flight", why)
    await slot.drain(SHUTDOWN_GRACE_S)
    cancelled = slot.in_flight()
    for speech in cancelled:
        speech.cancel(SpeechError("the server is shutting down", "ShuttingDown"))
    await slot.drain(ENDING_S)
    finished = sum(s not in cancelled for s in in_flight)
    await server.stop()
    if http is not None:
        await http.stop()
    services = models.close() if models is not None else list(slot.services.values())
    for service in services:
        await asyncio.to_thread(service.engine.close)
    log.info("stopped: %d requests finished, %d cancelled", finished, len(cancelled))
    if slot.profile.enabled:
        log.info("%s", slot.profile.summary())


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


ARG_NAMES = {f"{graph}_device": f"device_{graph}" for graph in GRAPHS}  # override -> argparse name, where they differ


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] = os.environ) -> ServerConfig:
    """config.yaml (or the defaults) with every flag that was given applied. The HTTP token may
    also come from the environment (below the flag, above config.yaml): a command line is
    visible to every user of the host, an environment only to the process's owner."""
    flags = {flag: getattr(args, ARG_NAMES.get(flag, flag)) for flag in OVERRIDES}
    if flags["http_token"] is None and env.get(HTTP_TOKEN_ENV, "").strip():
        flags["http_token"] = env[HTTP_TOKEN_ENV].strip()
    return apply_overrides(load_config(args.config), **flags)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_args(args)
        if args.list_devices:
            kernels = kernel_isas() if config.engine.kernels == "auto" else [config.engine.kernels]
            print(describe_devices(ov.Core(), requested_devices(config), config.precision.inference, kernels))
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
