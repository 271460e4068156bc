#!/opt/venv/bin/python3
"""The Home Assistant add-on's glue around `wyoming-qwen3tts`, in Python so it can be tested
without Docker or bashio.

  serve     /data/options.json -> the server's command line (the extra voices, several models
            and the memory budget become a small config file, the only way the server takes
            them), then exec the server
  discover  once the server lists its voices, announce it to the Supervisor, which makes
            Home Assistant offer the Wyoming integration. The server lists them seconds after
            it starts (from the model's config.json), before the model is downloaded,
            converted and compiled; requests sent meanwhile wait for the model (the server's
            loading_wait), so an entry set up early works once the model is loaded
  health    exit 0 when the server answers `describe` (the image's HEALTHCHECK): its event
            loop runs and its voice list is known (it closes the connection unanswered until
            then, seconds after start), also while the model is downloaded and converted
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger("qwen3tts-addon")

OPTIONS_FILE = Path("/data/options.json")  # written by the Supervisor from the add-on's options
DATA_DIR = Path("/data")  # persistent: conversions and compiled-model caches (excluded from backups)
SHARE_DIR = Path("/share/wyoming-qwen3tts")  # the user's clone references (relative ref_audio) and models
SERVER_CONFIG = Path("/tmp/wyoming-qwen3tts/config.yaml")  # regenerated at every start
PORT = 10200
INGRESS_PORT = 8099  # config.yaml's ingress_port: the voice lab, behind HA's ingress proxy
HA_CORE_URL = "http://supervisor/core"  # Home Assistant's REST API for add-ons (homeassistant_api)
MAX_EVENT_BYTES = 1024 * 1024  # the most read of an answer (the server bounds event data at 1 MiB)
DISCOVERY_URL = "http://supervisor/discovery"

# Add-on option -> the server flag that takes its value. `voices`, `models` and
# `memory_budget_mb` become a config file and `debug_logging` a switch; nothing else is
# passed, so an option missing here is a bug (tested).
VALUE_FLAGS = {
    "model": "--model",
    "weights": "--weights",
    "codec_weights": "--codec-weights",
    "voice": "--voice",
    "asr": "--asr",
    "device_talker": "--device-talker",
    "device_subcode": "--device-subcode",
    "device_decoder": "--device-decoder",
    "precision": "--precision",
    "kv_precision": "--kv-precision",
    "first_chunk": "--first-chunk",
    "steady_chunk": "--steady-chunk",
    "text_feeding": "--text-feeding",
    "normalize_text": "--normalize-text",
    "text_layout": "--text-layout",
    "backend": "--backend",
}
SWITCH_FLAGS = {"debug_logging": "--debug"}
CONFIG_OPTIONS = ("voices", "models", "memory_budget_mb")
VOICE_KEYS = ("name", "description", "language", "speaker", "instruct", "ref_audio", "ref_text", "x_vector_only",
              "model")
MODEL_KEYS = ("source", "weights", "preload")


def read_options(path: Path = OPTIONS_FILE) -> dict[str, Any]:
    """The add-on options; the Supervisor has validated them against config.yaml's schema."""
    options = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(options, dict):
        raise TypeError(f"{path}: expected a JSON object, got {type(options).__name__}")
    return options


def server_config(options: Mapping[str, Any], share_dir: Path = SHARE_DIR) -> dict[str, Any]:
    """The server config for the options the command line cannot carry: the extra voices,
    several models, the memory budget. Empty optional fields are dropped (the server refuses
    empty strings); a relative ref_audio is a file under share_dir, written absolute so the
    config's own location does not matter; a voice's model given as digits is an index."""
    config: dict[str, Any] = {}
    voices = []
    for voice in options.get("voices") or []:
        entry = {key: voice[key] for key in VOICE_KEYS if voice.get(key) not in (None, "")}
        if "ref_audio" in entry:
            entry["ref_audio"] = str(share_dir / Path(entry["ref_audio"]).expanduser())
        if str(entry.get("model", "")).isdigit():
            entry["model"] = int(entry["model"])
        voices.append(entry)
    if voices:
        config["voices"] = voices
    models = [{key: model[key] for key in MODEL_KEYS if model.get(key) not in (None, "")}
              for model in options.get("models") or []]
    if models:
        config["models"] = models
    if options.get("memory_budget_mb") is not None:
        config["model"] = {"memory_budget_mb": int(options["memory_budget_mb"])}
    return config


def server_command(options: Mapping[str, Any], config_path: Path | None) -> list[str]:
    """The server's argv: fixed listening addresses (Wyoming, and the voice lab for ingress),
    data dir and HA URL, one flag per set option, and --config when the rest was written to
    `config_path`. With several models, the `model` option is not passed (the config's
    models: list is served)."""
    known = set(VALUE_FLAGS) | set(SWITCH_FLAGS) | set(CONFIG_OPTIONS)
    for unknown in sorted(set(options) - known):
        log.warning("option %r is not used by this version of the add-on; remove it", unknown)
    argv = [sys.executable, "-m", "wyoming_qwen3tts", "--uri", f"tcp://0.0.0.0:{PORT}", "--data-dir", str(DATA_DIR),
            "--http", f"0.0.0.0:{INGRESS_PORT}", "--http-ingress", "--ha-url", HA_CORE_URL]
    for option, flag in VALUE_FLAGS.items():
        value = options.get(option)
        if option == "model" and options.get("models"):
            log.info("option 'model' is not used: the 'models' list is served")
            continue
        if value not in (None, ""):  # "" from a cleared text field means "not set"
            argv += [flag, str(value)]
    argv += [flag for option, flag in SWITCH_FLAGS.items() if options.get(option)]
    if config_path is not None:
        argv += ["--config", str(config_path)]
    return argv


def serve(options_file: Path = OPTIONS_FILE, config_file: Path = SERVER_CONFIG, share_dir: Path = SHARE_DIR,
          exec_: Callable[[str, list[str]], Any] = os.execv) -> None:
    """Write the server config (when an option needs it) and replace this process with the
    server, so s6 supervises the server itself and signals reach it directly."""
    options = read_options(options_file)
    config = server_config(options, share_dir)
    config_path = None
    if config:
        config_file.parent.mkdir(parents=True, exist_ok=True)
        config_file.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True), encoding="utf-8")
        config_path = config_file
    argv = server_command(options, config_path)
    log.info("starting: %s", " ".join(argv))
    exec_(argv[0], argv)


def describe(host: str = "127.0.0.1", port: int = PORT, timeout: float = 5.0) -> dict[str, Any] | None:
    """The server's answer to a Wyoming `describe` (the `info` event's data), or None when
    nothing answers with one."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b'{"type": "describe"}\n')
            stream = sock.makefile("rb")
            header = json.loads(stream.readline(MAX_EVENT_BYTES))
            if header.get("type") != "info":
                return None
            info = dict(header.get("data") or {})
            length = int(header.get("data_length") or 0)
            if not 0 <= length <= MAX_EVENT_BYTES:
                return None
            if length:
                info.update(json.loads(stream.read(length)))
            return info
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def has_voices(info: Mapping[str, Any] | None) -> bool:
    """True once the server's TTS program lists voices (the server never answers with an
    empty one; Home Assistant would set the integration up with nothing to choose)."""
    return info is not None and any(program.get("voices") for program in info.get("tts") or [])


def ready() -> bool:
    """Discovery's condition: the server on this machine lists its voices."""
    return has_voices(describe())


def post_json(url: str, payload: Mapping[str, Any], token: str, timeout: float = 10.0) -> dict[str, Any]:
    """POST to the Supervisor API the way bashio does; its answer is {"result": "ok", "data": ...}."""
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {token}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer = json.loads(response.read())
    if answer.get("result") != "ok":
        raise ValueError(f"the Supervisor refused: {answer.get('message', answer)}")
    return answer


def discover(env: Mapping[str, str], hostname: str, probe: Callable[[], bool] = ready,
             post: Callable[[str, Mapping[str, Any], str], Mapping[str, Any]] = post_json,
             sleep: Callable[[float], Any] = time.sleep, interval: float = 2.0,
             url: str = DISCOVERY_URL) -> str | None:
    """Wait until the server lists its voices, then send {"uri": "tcp://<hostname>:10200"}
    as a `wyoming` discovery (bashio::discovery's call). Returns the discovery's uuid, or None when skipped
    (no Supervisor) or refused: discovery is a convenience, so a failure is logged, not fatal
    (the integration can still be added by host and port)."""
    token = env.get("SUPERVISOR_TOKEN")
    if not token:
        log.info("SUPERVISOR_TOKEN is not set (not running under the Supervisor): no discovery")
        return None
    waited = 0.0
    while not probe():
        if waited % 60 < interval:  # say so once a minute
            log.info("waiting for the server to list its voices before announcing it to Home Assistant")
        sleep(interval)
        waited += interval
    uri = f"tcp://{hostname}:{PORT}"
    try:
        answer = post(url, {"service": "wyoming", "config": {"uri": uri}}, token)
        uuid = str(answer["data"]["uuid"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.error("discovery message to Home Assistant failed: %s", e)
        return None
    log.info("announced %s to Home Assistant (discovery %s)", uri, uuid)
    return uuid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="qwen3tts-addon", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("serve", "discover", "health"))
    parser.add_argument("--options", type=Path, default=OPTIONS_FILE, help="options file (default %(default)s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        serve(args.options)  # the server replaces this process (a failed exec raises)
    elif args.command == "discover":
        discover(os.environ, socket.gethostname())
    else:
        return 0 if describe() is not None else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
