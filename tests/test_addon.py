"""The Home Assistant add-on (addon/): its manifest against the Supervisor's rules and the
server's real command line, and its run logic against fake options files. No Docker, no
network beyond loopback: the Supervisor is a fake (an injected call or a local HTTP server)."""
from __future__ import annotations

import asyncio
import http.server
import importlib.util
import json
import os
import re
import socket
import sys
import threading
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest
import yaml
from wyoming.info import Attribution, Info, TtsProgram, TtsVoice
from wyoming.server import AsyncTcpServer

from wyoming_qwen3tts import __version__
from wyoming_qwen3tts.config import DEFAULT_MODEL, ConfigError, ServerConfig, VoiceConfig, load_config
from wyoming_qwen3tts.convert.pipeline import FIRST_CHUNKS, STEADY_CHUNKS
from wyoming_qwen3tts.engine.devices import PRECISION_SETTINGS, DeviceError, place
from wyoming_qwen3tts.server import app
from wyoming_qwen3tts.server.handler import ServiceSlot, TtsHandler
from wyoming_qwen3tts.server.models import conversion_dir

ADDON = Path(__file__).resolve().parents[1] / "addon"
RUN_SCRIPT = ADDON / "rootfs/usr/local/bin/qwen3tts_addon.py"
SETUP_SCRIPT = ADDON / "image-setup.sh"  # the install steps of both images
S6 = ADDON / "rootfs/etc/s6-overlay/s6-rc.d"
SERVER = [sys.executable, "-m", "wyoming_qwen3tts", "--uri", "tcp://0.0.0.0:10200", "--data-dir", "/data",
          "--http", "0.0.0.0:8099", "--http-ingress", "--ha-url", "http://supervisor/core"]


def _load_run_script() -> ModuleType:
    """The run script is a file in the image, not a package module: load it by path."""
    spec = importlib.util.spec_from_file_location("qwen3tts_addon", RUN_SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


addon = _load_run_script()


def _yaml(name: str) -> Any:
    return yaml.safe_load((ADDON / name).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def manifest() -> dict[str, Any]:
    return _yaml("config.yaml")


# --- the Supervisor's option schema types (developers.home-assistant, docs/apps/configuration.md)

_SCHEMA_TYPE = re.compile(r"(?:(?:str|int|float)(?:\(-?[\d.]*,-?[\d.]*\))?|bool|email|url|password|port"
                          r"|match\(.+\)|list\([^|()]+(?:\|[^|()]+)*\)|device(?:\(.+\))?)\??")


def _choices(spec: str) -> list[str]:
    match = re.fullmatch(r"list\((.+)\)\??", spec)
    assert match, f"{spec} is not a list(...) type"
    return match.group(1).split("|")


def _check_value(value: Any, spec: str, where: str) -> None:
    """A value as the Supervisor would accept it for a schema type (the types this add-on uses)."""
    base = spec.rstrip("?")
    if base == "str":
        assert isinstance(value, str), f"{where}: {value!r} is not a str"
    elif base == "bool":
        assert isinstance(value, bool), f"{where}: {value!r} is not a bool"
    elif base.startswith("list("):
        assert str(value) in _choices(base), f"{where}: {value!r} is not one of {_choices(base)}"
    elif base.startswith("int"):
        low = re.fullmatch(r"int(?:\((-?\d*),(-?\d*)\))?", base)
        assert low and isinstance(value, int) and not isinstance(value, bool), f"{where}: {value!r} is not an int"
        assert not low.group(1) or value >= int(low.group(1)), f"{where}: {value!r} below {low.group(1)}"
    else:
        pytest.fail(f"{where}: no check for schema type {spec}")


def test_manifest_has_the_required_keys_and_types(manifest: dict[str, Any]) -> None:
    for key in ("name", "version", "slug", "description"):
        assert isinstance(manifest[key], str) and manifest[key], key
    assert re.fullmatch(r"[a-z0-9_]+", manifest["slug"])
    assert manifest["arch"] == ["amd64"]
    assert manifest["init"] is False  # s6-overlay v3 is the image's init
    assert manifest["discovery"] == ["wyoming"]
    assert manifest["ports"] == {"10200/tcp": None}
    assert manifest["video"] is True  # every /dev/dri node: the iGPU
    assert manifest["devices"] == ["/dev/accel/accel0"]  # the NPU
    assert {"type": "share", "read_only": True} in manifest["map"]
    assert all(isinstance(pattern, str) for pattern in manifest["backup_exclude"])
    assert "image" not in manifest and "build_from" not in manifest  # built from addon/, its base an ARG default
    assert isinstance(manifest["options"], dict) and isinstance(manifest["schema"], dict)
    # the voice lab in the sidebar, through ingress, and HA's API for the refresh after a change
    assert manifest["ingress"] is True and manifest["ingress_port"] == addon.INGRESS_PORT == 8099
    assert manifest["ingress_stream"] is True and manifest["homeassistant_api"] is True
    assert manifest["panel_title"] == "Voices" and manifest["panel_icon"] == "mdi:account-voice"
    assert "8099/tcp" not in manifest["ports"]  # never published: only the ingress proxy reaches it


def test_versions_agree(manifest: dict[str, Any]) -> None:
    """The image installs this repository's package: the add-on carries its version."""
    assert manifest["version"] == __version__
    changelog = (ADDON / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(r"^## (\S+)", changelog, re.MULTILINE).group(1) == __version__
    assert f"ARG BUILD_VERSION={__version__}" in (ADDON / "Dockerfile").read_text(encoding="utf-8")


def test_schema_types_are_the_supervisors(manifest: dict[str, Any]) -> None:
    schema = manifest["schema"]
    for key, spec in schema.items():
        if key in ("voices", "models"):
            assert isinstance(spec, list) and len(spec) == 1 and isinstance(spec[0], dict)
            required = "name" if key == "voices" else "source"
            assert spec[0][required] == "str"  # an entry without one is refused by the Supervisor
            assert set(spec[0]) == set(addon.VOICE_KEYS if key == "voices" else addon.MODEL_KEYS)
            for field, field_spec in spec[0].items():
                assert _SCHEMA_TYPE.fullmatch(field_spec), f"{key}.{field}: {field_spec}"
        else:
            assert isinstance(spec, str) and _SCHEMA_TYPE.fullmatch(spec), f"{key}: {spec}"


def test_options_match_the_schema(manifest: dict[str, Any]) -> None:
    """Every option has a schema entry and a valid default; a schema entry without a default is
    optional (`?`), and an optional one has no default (the Supervisor would make it required)."""
    options, schema = manifest["options"], manifest["schema"]
    assert set(options) <= set(schema)
    for key, spec in schema.items():
        optional = isinstance(spec, str) and spec.endswith("?")
        assert (key in options) != optional, f"{key}: a default iff not optional"
    for key, value in options.items():
        if key in ("voices", "models"):
            assert value == []
        else:
            _check_value(value, schema[key], key)


def test_translations_cover_every_option(manifest: dict[str, Any]) -> None:
    translations = _yaml("translations/en.yaml")
    configuration = translations["configuration"]
    assert set(configuration) == set(manifest["schema"])
    for key, text in configuration.items():
        assert isinstance(text["name"], str) and text["name"], key
        assert isinstance(text["description"], str) and text["description"], key
    for listed in ("voices", "models"):
        fields = configuration[listed]["fields"]
        assert set(fields) == set(manifest["schema"][listed][0])
        assert all(text["name"] and text["description"] for text in fields.values())
    assert set(translations["network"]) == set(manifest["ports"])


def test_docs_explain_every_option(manifest: dict[str, Any]) -> None:
    docs = (ADDON / "DOCS.md").read_text(encoding="utf-8")
    for key in manifest["schema"]:
        assert re.search(rf"^### Option: .*`{key}`", docs, re.MULTILINE), key


# --- every option reaches a real flag of the server ----------------------------------------

VOICES = [
    {"name": "narrator", "description": "Narrator (English)", "language": "en", "speaker": "ryan",
     "instruct": "Speak slowly."},
    {"name": "anna", "description": "", "ref_audio": "voices/anna.wav", "ref_text": "Hello there."},
    {"name": "timbre", "ref_audio": "/media/timbre.wav", "x_vector_only": True},
    {"name": "calm", "instruct": "A calm, warm female voice."},
]

# Every option set, to values other than the defaults. The Supervisor hands list(...) values
# back as strings, hence the chunk sizes.
EVERYTHING = {
    "model": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", "weights": "fp16", "codec_weights": "int8", "voice": "narrator",
    "voices": VOICES,
    "asr": "tcp://core-whisper:10300",
    "device_talker": "GPU", "device_subcode": "GPU", "device_decoder": "NPU", "precision": "f16",
    "kv_precision": "f16", "first_chunk": "2", "steady_chunk": "24", "text_feeding": "sentence",
    "normalize_text": "off", "text_layout": "streaming", "backend": "openvino", "debug_logging": True,
    "memory_budget_mb": 4096,
}


def _write_options(tmp_path: Path, options: dict[str, Any]) -> Path:
    path = tmp_path / "options.json"
    path.write_text(json.dumps(options), encoding="utf-8")
    return path


def _serve(tmp_path: Path, options: dict[str, Any]) -> tuple[list[str], Path]:
    """Run the add-on's serve step on a fake options file; return what it would exec."""
    calls: list[tuple[str, list[str]]] = []
    voices_path = tmp_path / "run" / "voices.yaml"
    addon.serve(_write_options(tmp_path, options), voices_path, tmp_path / "share",
                exec_=lambda path, argv: calls.append((path, argv)))
    assert len(calls) == 1
    path, argv = calls[0]
    assert path == argv[0] == sys.executable
    return argv, voices_path


def test_every_option_is_passed_to_a_real_flag(manifest: dict[str, Any], tmp_path: Path) -> None:
    handled = set(addon.VALUE_FLAGS) | set(addon.SWITCH_FLAGS) | set(addon.CONFIG_OPTIONS)
    assert handled == set(manifest["schema"]) == set(EVERYTHING) | {"models"}
    argv, voices_path = _serve(tmp_path, EVERYTHING)
    assert argv[:3] == [sys.executable, "-m", "wyoming_qwen3tts"]
    args = app.parse_args(argv[3:])  # the server's own parser: an unknown flag or bad value exits
    for option, flag in addon.VALUE_FLAGS.items():
        value = getattr(args, flag.removeprefix("--").replace("-", "_"))
        value = value[0] if option == "model" else value  # --model may be given several times
        assert str(value) == str(EVERYTHING[option]), option
    assert args.debug is True
    assert args.config == voices_path
    assert (args.uri, args.data_dir) == ("tcp://0.0.0.0:10200", "/data")
    assert (args.http, args.http_ingress, args.ha_url) == ("0.0.0.0:8099", True, "http://supervisor/core")


def test_the_server_accepts_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The real entry point takes the exact argv (flags, values and the voices config file,
    validated like any config) as far as placing the graphs, without loading a model."""
    argv, _ = _serve(tmp_path, EVERYTHING)
    assert app.main(argv[3:] + ["--list-devices"]) == 0
    assert "talker -> " in capsys.readouterr().out


def test_schema_choices_are_what_the_server_takes(manifest: dict[str, Any]) -> None:
    schema = manifest["schema"]
    for graph in ("talker", "subcode", "decoder"):
        for device in _choices(schema[f"device_{graph}"]):
            place({graph: device}, ["CPU", "GPU", "NPU"])  # raises DeviceError for a device it refuses
    assert "NPU" in _choices(schema["device_decoder"])
    with pytest.raises(DeviceError):
        place({"talker": "NPU"}, ["CPU", "NPU"])  # why the talker and subcode do not offer it
    for option in ("weights", "codec_weights", "precision", "kv_precision"):
        for value in _choices(schema[option]):
            app.parse_args([addon.VALUE_FLAGS[option], value])
    assert _choices(schema["precision"]) == list(PRECISION_SETTINGS)  # auto, and every explicit one
    assert [int(n) for n in _choices(schema["first_chunk"])] == list(FIRST_CHUNKS)  # what every conversion exports
    assert [int(n) for n in _choices(schema["steady_chunk"])] == list(STEADY_CHUNKS)


# --- the command line and the voices file, exactly ----------------------------------------

def test_defaults_give_the_plain_command(manifest: dict[str, Any], tmp_path: Path) -> None:
    argv, voices_path = _serve(tmp_path, manifest["options"])  # what the Supervisor writes on install
    assert argv == SERVER + ["--model", DEFAULT_MODEL, "--weights", "auto", "--codec-weights", "fp32",
                             "--device-talker", "CPU",
                             "--device-subcode", "CPU", "--device-decoder", "CPU", "--precision", "auto",
                             "--kv-precision", "u8", "--first-chunk", "1", "--steady-chunk", "8",
                             "--text-feeding", "word", "--normalize-text", "auto", "--text-layout", "auto",
                             "--backend", "auto"]
    assert not voices_path.exists()  # no voices: no config file, the server's defaults
    precision = ServerConfig().precision  # and the options the add-on passes are the server's defaults
    assert (manifest["options"]["precision"], manifest["options"]["kv_precision"]) == (precision.inference,
                                                                                      precision.kv_cache)
    assert manifest["options"]["text_feeding"] == ServerConfig().server.text_feeding
    assert manifest["options"]["normalize_text"] == ServerConfig().server.normalize_text
    assert manifest["options"]["text_layout"] == ServerConfig().engine.text_layout
    assert manifest["options"]["backend"] == ServerConfig().engine.backend
    assert manifest["options"]["weights"] == ServerConfig().model.weights == "auto"  # docs/WEIGHTS.md
    assert manifest["options"]["codec_weights"] == ServerConfig().model.codec_weights == "fp32"


def test_devices_voices_and_debug(tmp_path: Path) -> None:
    argv, voices_path = _serve(tmp_path, EVERYTHING)
    assert argv == SERVER + ["--model", "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice", "--weights", "fp16",
                             "--codec-weights", "int8", "--voice", "narrator", "--asr", "tcp://core-whisper:10300",
                             "--device-talker", "GPU",
                             "--device-subcode", "GPU",
                             "--device-decoder", "NPU", "--precision", "f16", "--kv-precision", "f16",
                             "--first-chunk", "2", "--steady-chunk", "24", "--text-feeding", "sentence",
                             "--normalize-text", "off", "--text-layout", "streaming", "--backend", "openvino",
                             "--debug",
                             "--config", str(voices_path)]
    share = tmp_path / "share"
    assert yaml.safe_load(voices_path.read_text(encoding="utf-8")) == {"voices": [
        VOICES[0],
        {"name": "anna", "ref_audio": str(share / "voices/anna.wav"), "ref_text": "Hello there."},
        {"name": "timbre", "ref_audio": "/media/timbre.wav", "x_vector_only": True},
        VOICES[3],
    ], "model": {"memory_budget_mb": 4096}}
    assert load_config(voices_path).voices == (  # a valid server config
        VoiceConfig(name="narrator", description="Narrator (English)", language="en", speaker="ryan",
                    instruct="Speak slowly."),
        VoiceConfig(name="anna", ref_audio=str(share / "voices/anna.wav"), ref_text="Hello there."),
        VoiceConfig(name="timbre", ref_audio="/media/timbre.wav", x_vector_only=True),
        VoiceConfig(name="calm", instruct="A calm, warm female voice."),
    )


def test_cleared_and_unknown_options(manifest: dict[str, Any], tmp_path: Path,
                                     caplog: pytest.LogCaptureFixture) -> None:
    options = {**manifest["options"], "voice": "", "max_piper_procs": 2}
    argv, _ = _serve(tmp_path, options)
    assert "--voice" not in argv and "max_piper_procs" not in " ".join(argv)
    assert "'max_piper_procs' is not used" in caplog.text


def test_models_stay_out_of_backups(manifest: dict[str, Any]) -> None:
    """The conversions the server writes into the data dir, and the Hugging Face download
    (HF_HOME in the image), are under top-level folders that backup_exclude names."""
    excluded = set(manifest["backup_exclude"])
    converted = conversion_dir(DEFAULT_MODEL, addon.DATA_DIR, "int8").relative_to(addon.DATA_DIR)
    assert converted.parts[0] in excluded
    hf_home = re.search(r"HF_HOME=(\S+)", (ADDON / "Dockerfile").read_text(encoding="utf-8")).group(1)
    assert Path(hf_home).relative_to(addon.DATA_DIR).parts[0] in excluded


# --- discovery -----------------------------------------------------------------------------

def test_discovery_is_skipped_without_the_supervisor() -> None:
    def fail(*_: Any) -> Any:
        raise AssertionError("no Supervisor: nothing may be probed or posted")

    assert addon.discover({}, "host", probe=fail, post=fail, sleep=fail) is None


def test_discovery_waits_for_the_server_then_announces_it() -> None:
    answers = iter([False, False, True])
    sleeps: list[float] = []
    posts: list[tuple[str, Any, str]] = []

    def post(url: str, payload: Any, token: str) -> dict[str, Any]:
        posts.append((url, payload, token))
        return {"result": "ok", "data": {"uuid": "abc123"}}

    uuid = addon.discover({"SUPERVISOR_TOKEN": "secret"}, "a0d7b954-qwen3tts", probe=lambda: next(answers),
                          post=post, sleep=sleeps.append, interval=0.5)
    assert uuid == "abc123"
    assert sleeps == [0.5, 0.5]
    assert posts == [("http://supervisor/discovery",
                      {"service": "wyoming", "config": {"uri": "tcp://a0d7b954-qwen3tts:10200"}}, "secret")]


@pytest.mark.parametrize("failure", [OSError("connection refused"), ValueError("the Supervisor refused"),
                                     {"result": "ok", "data": {}}])
def test_a_failed_announcement_is_logged_not_fatal(failure: Any, caplog: pytest.LogCaptureFixture) -> None:
    def post(*_: Any) -> Any:
        if isinstance(failure, Exception):
            raise failure
        return failure

    assert addon.discover({"SUPERVISOR_TOKEN": "t"}, "h", probe=lambda: True, post=post) is None
    assert "discovery message to Home Assistant failed" in caplog.text


class _Supervisor(http.server.BaseHTTPRequestHandler):
    """A fake Supervisor API: records each POST, answers with the class's reply."""

    reply: ClassVar[tuple[int, dict[str, Any]]] = (200, {"result": "ok", "data": {"uuid": "u1"}})
    requests: ClassVar[list[tuple[str, str, str, Any]]] = []

    def do_POST(self) -> None:  # the http.server hook
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Supervisor.requests.append((self.path, self.headers["Authorization"], self.headers["Content-Type"], body))
        status, answer = self.reply
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def supervisor() -> Iterator[str]:
    _Supervisor.requests = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Supervisor)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/discovery"
    server.shutdown()
    server.server_close()


def test_post_json_speaks_the_supervisor_api(supervisor: str) -> None:
    uuid = addon.discover({"SUPERVISOR_TOKEN": "tok"}, "myhost", probe=lambda: True, url=supervisor)
    assert uuid == "u1"
    assert _Supervisor.requests == [("/discovery", "Bearer tok", "application/json",
                                     {"service": "wyoming", "config": {"uri": "tcp://myhost:10200"}})]


@pytest.mark.parametrize("reply", [(200, {"result": "error", "message": "no such service"}),
                                   (400, {"result": "error", "message": "bad request"})])
def test_post_json_raises_when_refused(supervisor: str, reply: tuple[int, dict[str, Any]],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_Supervisor, "reply", reply)
    with pytest.raises((ValueError, OSError)):
        addon.post_json(supervisor, {"service": "wyoming", "config": {}}, "tok")


def _answering(reply: bytes) -> tuple[socket.socket, threading.Thread]:
    """A one-connection TCP server that reads one line and sends `reply`."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.makefile("rb").readline()
            connection.sendall(reply)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return listener, thread


@pytest.mark.parametrize(("reply", "info"), [
    (b'{"type": "info", "data_length": 11}\n{"tts": []}', {"tts": []}),
    (b'{"type": "info", "data": {"asr": []}}\n', {"asr": []}),  # data inline, as older peers send it
    (b'{"type": "error", "data": {"text": "busy"}}\n', None),
    (b'{"type": "info", "data_length": 99999999}\n', None),
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", None),
    (b"", None),
])
def test_describe_probe(reply: bytes, info: dict[str, Any] | None) -> None:
    listener, thread = _answering(reply)
    with listener:
        assert addon.describe("127.0.0.1", listener.getsockname()[1], timeout=5) == info
        thread.join(5)


def test_describe_probe_with_nothing_listening() -> None:
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    assert addon.describe("127.0.0.1", port, timeout=2) is None


@pytest.fixture
def real_handler() -> Iterator[tuple[ServiceSlot, int]]:
    """The server's own Wyoming handler on a loopback port, with a slot whose info the test
    sets (none until the voice list is known, then the voices)."""
    slot = ServiceSlot()
    with socket.create_server(("127.0.0.1", 0)) as placeholder:
        port = placeholder.getsockname()[1]
    server = AsyncTcpServer("127.0.0.1", port)
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start(partial(TtsHandler, slot)))
        started.set()
        loop.run_forever()
        try:  # stopped: no thread of its executor (the listener's address lookup) outlives it
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(10)
    yield slot, port
    asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_announced_once_the_server_lists_voices(real_handler: tuple[ServiceSlot, int]) -> None:
    """Until the server knows its voice list it leaves `describe` unanswered (Home Assistant
    retries); the add-on announces it only once its TTS program lists voices."""
    slot, port = real_handler
    assert addon.describe("127.0.0.1", port) is None
    slot.info = Info(tts=[TtsProgram(name="qwen3tts", attribution=Attribution(name="", url=""), installed=True,
                                     description="loaded", version=__version__, voices=[
                                         TtsVoice(name="ryan", attribution=Attribution(name="", url=""),
                                                  installed=True, description="Ryan", version=None,
                                                  languages=["en"])])])
    assert addon.has_voices(addon.describe("127.0.0.1", port))


@pytest.mark.parametrize(("info", "status"), [({"tts": [{"name": "qwen3tts", "voices": []}]}, 0), (None, 1)])
def test_health_command(info: dict[str, Any] | None, status: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """HEALTHCHECK's verdict: a server that answers is healthy, also while it loads."""
    monkeypatch.setattr(addon, "describe", lambda: info)
    assert addon.main(["health"]) == status


# --- the image's wiring --------------------------------------------------------------------

def test_s6_services_run_the_run_script() -> None:
    assert (S6 / "qwen3tts/type").read_text().strip() == "longrun"
    assert (S6 / "discovery/type").read_text().strip() == "oneshot"
    assert (S6 / "discovery/up").read_text().strip() == "/etc/s6-overlay/s6-rc.d/discovery/run"
    assert (S6 / "discovery/dependencies.d/qwen3tts").exists()  # announce only what runs
    assert {p.name for p in (S6 / "user/contents.d").iterdir()} == {"qwen3tts", "discovery"}
    for script, command in (("qwen3tts/run", "serve"), ("discovery/run", "discover")):
        text = (S6 / script).read_text()
        assert text.startswith("#!/command/with-contenv bash\n")  # the container's env: SUPERVISOR_TOKEN
        assert f"exec /usr/local/bin/qwen3tts_addon.py {command}\n" in text
    for executable in (S6 / "qwen3tts/run", S6 / "qwen3tts/finish", S6 / "discovery/run", RUN_SCRIPT):
        assert os.access(executable, os.X_OK), executable
    with pytest.raises(SystemExit):
        addon.main(["no-such-command"])


def test_dockerfile_wiring() -> None:
    dockerfile = (ADDON / "Dockerfile").read_text(encoding="utf-8")
    # FROM resolves without a build.yaml (current Supervisors pass no BUILD_FROM): an ARG default
    assert re.search(r"^ARG BUILD_FROM=ghcr\.io/home-assistant/base-debian:trixie$", dockerfile, re.MULTILINE)
    assert re.search(r"^FROM \$\{BUILD_FROM\} AS runtime$", dockerfile, re.MULTILINE)
    assert "COPY rootfs /" in dockerfile
    assert "COPY --from=venv /opt/venv /opt/venv" in dockerfile  # the compiler stays in the build stage
    assert 'CMD ["/usr/local/bin/qwen3tts_addon.py", "health"]' in dockerfile
    assert RUN_SCRIPT.read_text().startswith("#!/opt/venv/bin/python3\n")
    # the install steps are the script both images share (docker/Dockerfile copies it from here)
    container = (ADDON.parent / "docker/Dockerfile").read_text(encoding="utf-8")
    for step in ("runtime", "venv", "intel-drivers"):
        run_step = rf"^\s*(RUN|&&) bash /usr/local/lib/qwen3tts/image-setup\.sh {step}\b"
        assert re.search(run_step, dockerfile, re.MULTILINE) and re.search(run_step, container, re.MULTILINE)
    setup = SETUP_SCRIPT.read_text(encoding="utf-8")
    assert "python3 -m venv /opt/venv" in setup
    # every download is checked: one sha256 per URL
    urls = re.findall(r"^\s+https://github\.com/\S+/(\S+?)(?: \\)?$", setup, re.MULTILINE)
    checked = dict(re.findall(r"^\s+([0-9a-f]{64}) (\S+)", setup, re.MULTILINE))
    assert urls and sorted(urls) == sorted(checked.values())
    # Intel's drivers come from GitHub: on by default, skippable for a build without it
    assert re.search(r"^ARG INTEL_DRIVERS=true$", dockerfile, re.MULTILINE)
    assert re.search(r"^ARG WHEELS_ONLY=false$", dockerfile, re.MULTILINE)  # PyPI by default


def _dockerfile_sources(dockerfile: str) -> list[str]:
    """The context paths COPY/ADD read (not --from=stage copies)."""
    sources = []
    for line in dockerfile.splitlines():
        words = line.split()
        if words and words[0] in ("COPY", "ADD") and not any(w.startswith("--from=") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    return sources


def test_the_addon_folder_is_the_whole_build_context() -> None:
    """The Supervisor builds in the add-on's folder of a fresh clone: everything the Dockerfile
    copies is a committed path inside it, and the package comes from the tag of the add-on's
    version in the repository that repository.yaml names."""
    dockerfile = (ADDON / "Dockerfile").read_text(encoding="utf-8")
    sources = _dockerfile_sources(dockerfile)
    assert sources == ["image-setup.sh", "wheels/", "rootfs"]
    for source in sources:
        path = (ADDON / source).resolve()
        assert path.is_relative_to(ADDON) and path.exists(), source
    # wheels/ exists in a clone (its .gitignore is committed) and holds nothing else committed
    assert (ADDON / "wheels/.gitignore").read_text(encoding="utf-8").splitlines()[-2:] == ["*", "!.gitignore"]
    assert not (ADDON / "build.yaml").exists()  # no longer read; BUILD_FROM has a default instead
    repository = yaml.safe_load((ADDON.parent / "repository.yaml").read_text(encoding="utf-8"))
    assert repository["name"] and repository["maintainer"]
    assert f"ARG SOURCE_REPOSITORY={repository['url']}" in dockerfile
    assert f"`{repository['url']}`" in (ADDON / "DOCS.md").read_text(encoding="utf-8")  # what users add
    assert "${SOURCE_REPOSITORY}/archive/refs/tags/v${BUILD_VERSION}.tar.gz" in dockerfile


def test_the_supervisor_finds_one_addon() -> None:
    """The Supervisor reads every config.{yaml,yml,json} outside dot folders and rootfs/ as an
    add-on manifest. Besides the add-on's, only the server's example config.yaml is one (it is
    logged as an invalid add-on; DOCS.md says why); a committed checkpoint's config.json would be
    another."""
    root = ADDON.parent
    manifests = sorted(str(path.relative_to(root)) for pattern in ("config.yaml", "config.yml", "config.json")
                       for path in root.rglob(pattern)
                       if not any(part.startswith(".") or part in ("rootfs", "build", "models", "node_modules")
                                  for part in path.relative_to(root).parts[:-1]))
    assert manifests == ["addon/config.yaml", "config.yaml"]
    assert "the top-level `config.yaml`" in (ADDON / "DOCS.md").read_text(encoding="utf-8")


# --- several models ------------------------------------------------------------------------

def test_the_models_option_serves_a_list_and_voices_name_theirs(tmp_path: Path) -> None:
    options = {"model": DEFAULT_MODEL, "weights": "int4", "memory_budget_mb": 3000,
               "models": [{"source": DEFAULT_MODEL}, {"source": "Qwen/Qwen3-TTS-12Hz-0.6B-Base", "weights": "int8",
                                                        "preload": False}],
               "voices": [{"name": "grandma", "ref_audio": "grandma.wav", "ref_text": "Hello.", "model": "1"}]}
    argv, config_path = _serve(tmp_path, options)
    assert "--model" not in argv and argv[-2:] == ["--config", str(config_path)]
    config = app.config_from_args(app.parse_args(argv[3:]))  # as the server reads it
    assert [(m.source, m.weights, m.preload) for m in config.model_entries] == [
        (DEFAULT_MODEL, "int4", True), ("Qwen/Qwen3-TTS-12Hz-0.6B-Base", "int8", False)]
    assert config.voices[0].model == 1 and config.model.memory_budget_mb == 3000


def test_a_voice_naming_a_model_not_served_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    options = {"models": [{"source": DEFAULT_MODEL}], "voices": [{"name": "calm", "instruct": "Calm.", "model": "2"}]}
    argv, _ = _serve(tmp_path, options)
    with pytest.raises(ConfigError, match=r"voices\[0\]\.model: 2 is not a model index"):
        app.config_from_args(app.parse_args(argv[3:]))


def test_a_voice_no_served_model_can_serve_stops_the_start_naming_it(tmp_path: Path, converted_factory,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Through the server's real start: the models' voices are planned before any load."""
    models = [{"source": str(converted_factory("tiny", variant, "int8"))} for variant in ("custom_voice", "base")]
    options = {"models": models, "voices": [{"name": "calm", "instruct": "A calm voice."}]}
    argv, _ = _serve(tmp_path, options)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [a if a != "tcp://0.0.0.0:10200" else f"tcp://127.0.0.1:{port}" for a in argv]
    argv[argv.index("--data-dir") + 1] = str(tmp_path / "data")
    assert app.main(argv[3:]) == 2
    assert "voices[0]: no served model can serve 'calm'" in caplog.text
