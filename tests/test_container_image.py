"""The standalone container image (docker/Dockerfile, docs/CONTAINER.md), built from a clone's
files as `docker build -f docker/Dockerfile .` builds it (here `buildah bud`), then run as
`docker run -v DATA:/data -e QWEN3TTS_HTTP_TOKEN=...` runs it: the entrypoint finds
/data/config.yaml, the server converts the tiny generated checkpoint in /data, lists its voices
on `describe`, speaks, and answers on its HTTP side; as the image's own user, not root.

Opt-in, never skipped when asked for (what it stands in for, and why: tests/image_build.py):

    apt-get install -y podman buildah debootstrap
    python -m pytest -m e2e tests/test_container_image.py -s
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from image_build import (
    STORAGE,
    base_image,
    build,
    check_tools,
    copy_tree,
    in_container,
    link_wheels,
    requirements,
    speak_once_loaded,
    stop,
    wait_for_voices,
    wheelhouse,
    working_container,
)
from test_server import free_port

from qwen3tts_tools.synthetic.writer import write_checkpoint
from wyoming_qwen3tts import __version__

pytestmark = pytest.mark.e2e

IMAGE = "localhost/qwen3tts-test/container:latest"
WYOMING_PORT = 10200  # fixed in the image; a chroot-isolated container shares the host's network
USER = "qwen3tts"
UID = 10200
TOKEN = "test-token-0123456789"


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The repository as a clone has it is the context, the wheelhouse in docker/wheels/."""
    check_tools()
    ctx = copy_tree(tmp_path_factory.mktemp("container-context") / "repo")
    link_wheels(wheelhouse(requirements()), ctx / "docker/wheels")
    yield from build(IMAGE, ctx, "docker/Dockerfile", {
        "BASE_IMAGE": base_image(), "INTEL_DRIVERS": "false", "WHEELS_ONLY": "true"}, "last-container-build.json")


@pytest.fixture
def container(image: dict) -> Iterator[str]:
    yield from working_container(IMAGE)


def test_image_config_and_contents(image: dict, container: str) -> None:
    """The image runs as its own user, keeps its state in /data, publishes both ports, checks
    its health over Wyoming; it carries what runs (no compiler, no test stack)."""
    config = image["config"]
    assert config["User"] == USER
    assert config["Entrypoint"] == ["/usr/local/bin/qwen3tts-container"] and config["Cmd"] == ["serve"]
    assert set(config["ExposedPorts"]) == {"10200/tcp", "8000/tcp"}
    assert config["WorkingDir"] == "/data" and not config.get("Volumes")  # a named volume or bind mount on /data
    assert "HF_HOME=/data/huggingface" in config["Env"]
    assert image["healthcheck"]["Test"] == ["CMD", "/usr/local/bin/qwen3tts-container", "health"]
    checks = ("import importlib.util as u, os, shutil, wyoming_qwen3tts, wyoming_qwen3tts._native, nncf;"
              "print(wyoming_qwen3tts.__version__);"
              "print([m for m in ('torch', 'transformers', 'pytest', 'qwen_tts', 'qwen3tts_tools',"
              " 'wyoming_qwen3tts.bench', 'wyoming_qwen3tts.model.synthetic') if u.find_spec(m)]);"
              "print([t for t in ('g++', 'cc', 'cmake', 'curl') if shutil.which(t)]);"
              "print(os.getuid(), os.stat('/data').st_uid)")
    out = in_container(container, "/opt/venv/bin/python", "-c", checks).split("\n")
    assert out[:4] == [__version__, "[]", "[]", f"{UID} {UID}"], out


def test_the_http_side_needs_a_token(image: dict, container: str) -> None:
    """Its port is reachable from outside the container: without a token the server does not
    start, and says what to set."""
    done = subprocess.run(["buildah", *STORAGE, "run", "--isolation", "chroot", container, "--",
                           "/usr/local/bin/qwen3tts-container"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    assert "QWEN3TTS_HTTP_TOKEN is not set" in done.stderr, done.stderr


def _http_health(port: int, token: str | None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/health")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def test_data_volume_to_describe_audio_and_http_health(image: dict, container: str, tmp_path: Path) -> None:
    """/data/config.yaml names a checkpoint in /data (standing in for a download): the server
    converts it into /data, lists its voices, speaks, and its HTTP side reports healthy."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", WYOMING_PORT)) == 0:
            pytest.fail(f"port {WYOMING_PORT} is taken on this machine; the container shares its network",
                        pytrace=False)
    http_port = free_port()
    data = tmp_path / "data"
    write_checkpoint(data / "tiny", "tiny", "custom_voice")
    settings = {"model": {"source": "/data/tiny"}, "server": {"default_voice": "ryan"},
                "voices": [{"name": "narrator", "description": "Narrator", "speaker": "ryan", "language": "en"}]}
    (data / "config.yaml").write_text(yaml.safe_dump(settings), encoding="utf-8")
    for path in [data, *data.rglob("*")]:
        os.chown(path, UID, UID)  # a named volume gets the image's /data owner; a bind mount is chowned
    log = tmp_path / "container.log"
    with log.open("w") as out:
        proc = subprocess.Popen(["buildah", *STORAGE, "run", "--isolation", "chroot", "--volume", f"{data}:/data",
                                 "--env", f"QWEN3TTS_HTTP_TOKEN={TOKEN}", "--env", f"QWEN3TTS_HTTP=0.0.0.0:{http_port}",
                                 container, "--", "/usr/local/bin/qwen3tts-container"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"tcp://127.0.0.1:{WYOMING_PORT}"
    try:
        start = time.monotonic()
        info = wait_for_voices(proc, uri, log, start)
        voices = [voice.name for voice in info.tts[0].voices]
        assert "narrator" in voices and "ryan" in voices, voices
        in_container(container, "/usr/local/bin/qwen3tts-container", "health", timeout=60)  # as Docker runs it
        reply = speak_once_loaded(uri, "Hello from the container.", "narrator", log, start)
        # the model is loaded (it just spoke): the HTTP side says healthy
        assert _http_health(http_port, TOKEN) == 200
        print(f"\nthe container: audio after {time.monotonic() - start:.0f} s (converted and loaded): "
              f"{reply.seconds:.2f} s of audio in {reply.total_s:.2f} s; image {image['size_bytes'] / 1e9:.2f} GB")
    finally:
        stop(proc)
    text = log.read_text()
    assert "starting: " in text and "--config /data/config.yaml" in text and TOKEN not in text, text[-3000:]
    assert "Traceback" not in text, text[-6000:]
    converted = [path for path in (data / "converted").rglob("*") if path.is_file()]
    assert converted and all(path.stat().st_uid == UID for path in converted), "not converted into /data as its user"
