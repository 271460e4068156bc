"""The standalone container's entrypoint (docker/entrypoint.py) and compose file, without a
container: the server's command line from /data and the environment. The image itself is
tests/test_container_image.py (opt-in)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from wyoming_qwen3tts.server.app import config_from_args, parse_args

DOCKER = Path(__file__).resolve().parents[1] / "docker"


def _load_entrypoint() -> ModuleType:
    """The entrypoint is a file in the image, not a package module: load it by path."""
    spec = importlib.util.spec_from_file_location("qwen3tts_container", DOCKER / "entrypoint.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


entry = _load_entrypoint()
SERVER = [sys.executable, "-m", "wyoming_qwen3tts", "--uri", "tcp://0.0.0.0:10200", "--data-dir", "/data"]


def test_defaults_and_flags_last(tmp_path: Path) -> None:
    env = {"QWEN3TTS_HTTP_TOKEN": "secret"}
    argv = entry.server_command(env, ["--device-decoder", "GPU"], config_file=tmp_path / "none.yaml")
    assert argv == [*SERVER, "--http", "0.0.0.0:8000", "--device-decoder", "GPU"]  # no token on the command line
    config = config_from_args(parse_args(argv[3:]), env)  # the server takes every flag, and the token from env
    assert (config.server.http, config.server.http_token) == ("0.0.0.0:8000", "secret")
    assert config.model.data_dir == "/data" and config.devices.decoder == "GPU"


def test_config_file_when_present(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("model:\n  weights: int4\n", encoding="utf-8")
    argv = entry.server_command({"QWEN3TTS_HTTP": "off"}, [], config_file=config)
    assert argv == [*SERVER, "--config", str(config)]


@pytest.mark.parametrize("env", [{}, {"QWEN3TTS_HTTP_TOKEN": "  "}, {"QWEN3TTS_HTTP": "0.0.0.0:9000"}])
def test_the_http_side_needs_a_token(env: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(entry.SetupError, match="QWEN3TTS_HTTP_TOKEN is not set"):
        entry.server_command(env, [], config_file=tmp_path / "none.yaml")


def test_without_a_token_the_container_exits_with_a_message(monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("QWEN3TTS_HTTP_TOKEN", raising=False)
    monkeypatch.delenv("QWEN3TTS_HTTP", raising=False)
    assert entry.main([]) == 2 and "QWEN3TTS_HTTP_TOKEN is not set" in caplog.text


def test_serve_execs_the_server_and_hides_the_token(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entry, "CONFIG_FILE", tmp_path / "none.yaml")
    calls: list[tuple[str, list[str]]] = []
    caplog.set_level("INFO")
    entry.serve(["--debug"], env={"QWEN3TTS_HTTP_TOKEN": "secret", "QWEN3TTS_HTTP": "0.0.0.0:8123"},
                exec_=lambda path, argv: calls.append((path, argv)))
    [(path, argv)] = calls
    assert path == sys.executable and argv[-3:] == ["--http", "0.0.0.0:8123", "--debug"]
    assert "secret" not in " ".join(argv) and "secret" not in caplog.text


def test_a_users_own_token_flag_is_hidden_in_the_log(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entry, "CONFIG_FILE", tmp_path / "none.yaml")
    caplog.set_level("INFO")
    entry.serve(["--http-token", "other"], env={"QWEN3TTS_HTTP_TOKEN": "secret"}, exec_=lambda path, argv: None)
    assert "other" not in caplog.text and "--http-token ***" in caplog.text


def test_help_and_version_need_no_token() -> None:
    calls: list[list[str]] = []
    entry.serve(["--version"], env={}, exec_=lambda path, argv: calls.append(argv))
    assert calls == [[sys.executable, "-m", "wyoming_qwen3tts", "--version"]]


def test_compose_file() -> None:
    """Both ports, the volume, both device trees with the render group, a restart policy, the
    token required, built from the repository root."""
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))
    (service,) = compose["services"].values()
    assert service["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}
    assert service["ports"] == ["10200:10200", "8000:8000"]
    assert service["volumes"] == ["qwen3tts-data:/data"] and "qwen3tts-data" in compose["volumes"]
    assert service["devices"] == ["/dev/dri:/dev/dri", "/dev/accel:/dev/accel"]
    assert service["group_add"] == ["${RENDER_GID:-992}"]
    assert service["restart"] == "unless-stopped"
    assert service["environment"]["QWEN3TTS_HTTP_TOKEN"].startswith("${QWEN3TTS_HTTP_TOKEN:?")
