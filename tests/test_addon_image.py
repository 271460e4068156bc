"""The add-on image, built as the Supervisor builds it: the add-on folder alone as the context
(`docker buildx build .` in addon/, here `buildah bud`), BUILD_FROM/BUILD_VERSION/BUILD_ARCH as
build arguments. Then, in the built image, the add-on's start: /data/options.json -> the
launcher -> the server, which converts a tiny generated checkpoint standing in for the
download, lists its voices on `describe` and answers a one-shot request with audio.

Opt-in (minutes of CPU, root, and Debian's container tools), never skipped when asked for:

    apt-get install -y podman buildah debootstrap
    python -m pytest -m e2e tests/test_addon_image.py -s

What it stands in for, and why:
- The Home Assistant base image cannot be pulled here: a Debian trixie root made by
  `debootstrap` and imported with `podman import` is passed as BUILD_FROM (it has no
  s6-overlay or bashio, so the launcher is run directly, as s6's run script does).
- A container build here reaches Debian's mirror but not PyPI or GitHub: Intel's driver
  releases are left out (INTEL_DRIVERS=false), and pip installs from a wheelhouse made on the
  host with `pip download` for the image's Python (WHEELS_ONLY=true), plus a source archive of
  this working tree in the layout of the tag archive the image installs by default
  (PACKAGE_URL).

Cached between runs (tests/image_build.py, shared with test_container_image.py): the Debian
root, the wheelhouse, the image's Python and the container storage (vfs). The built image is
removed at the end unless QWEN3TTS_IMAGE_KEEP=1.
"""
from __future__ import annotations

import json
import socket
import subprocess
import time
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
    source_archive,
    speak_once_loaded,
    stop,
    wait_for_voices,
    wheelhouse,
    working_container,
)

from qwen3tts_tools.synthetic.recording import speech_like, write_float_wav
from qwen3tts_tools.synthetic.writer import write_checkpoint
from wyoming_qwen3tts import __version__

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
ADDON = REPO / "addon"
IMAGE = "localhost/qwen3tts-test/addon:latest"
PORT = 10200  # fixed in the add-on; a chroot-isolated container shares the host's network
INGRESS_PORT = 8099  # the voice lab, behind HA's ingress proxy


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The add-on folder alone, as a clone has it, with the wheelhouse and the package's source
    archive in its wheels/ folder. Returns the context and the archive's URL inside the build."""
    check_tools()
    ctx = copy_tree(tmp_path_factory.mktemp("addon-context") / "addon", prefix="addon/")
    assert (ctx / "Dockerfile").is_file() and (ctx / "config.yaml").is_file()
    link_wheels(wheelhouse(requirements()), ctx / "wheels")
    archive = source_archive(ctx / "wheels")
    return ctx, f"file:///tmp/wheels/{archive.name}"


@pytest.fixture(scope="module")
def image(context: tuple[Path, str]) -> Iterator[dict]:
    """Build as the Supervisor does: in the add-on folder, its Dockerfile, the Supervisor's
    build arguments; plus the offline ones. Yields what was measured."""
    ctx, package_url = context
    version = yaml.safe_load((ctx / "config.yaml").read_text(encoding="utf-8"))["version"]
    for measured in build(IMAGE, ctx, "Dockerfile", {
            "BUILD_FROM": base_image(), "BUILD_VERSION": version, "BUILD_ARCH": "amd64",
            "INTEL_DRIVERS": "false", "WHEELS_ONLY": "true", "PACKAGE_URL": package_url}, "last-addon-build.json"):
        yield {**measured, "version": version}


@pytest.fixture
def container(image: dict) -> Iterator[str]:
    yield from working_container(IMAGE)


def test_image_labels_and_contents(image: dict, container: str) -> None:
    """The Supervisor's build arguments reach the image; what the image carries is what runs
    (no compiler, no test stack, no developer tools), and the native runner imports."""
    assert image["labels"]["io.hass.version"] == image["version"] == __version__
    assert image["labels"]["io.hass.arch"] == "amd64"
    assert image["labels"]["io.hass.type"] == "addon"
    assert image["healthcheck"]["Test"] == ["CMD", "/usr/local/bin/qwen3tts_addon.py", "health"]
    checks = ("import importlib.util as u, shutil, wyoming_qwen3tts, wyoming_qwen3tts._native, nncf, huggingface_hub;"
              "print(wyoming_qwen3tts.__version__);"
              "print([m for m in ('torch', 'transformers', 'pytest', 'qwen_tts', 'matplotlib', 'qwen3tts_tools',"
              " 'wyoming_qwen3tts.bench', 'wyoming_qwen3tts.model.synthetic') if u.find_spec(m)]);"
              "print([t for t in ('g++', 'cc', 'cmake', 'curl') if shutil.which(t)])")
    out = in_container(container, "/opt/venv/bin/python", "-c", checks).split("\n")
    assert out[:3] == [__version__, "[]", "[]"], out


def test_options_to_describe_to_audio(image: dict, container: str, tmp_path: Path) -> None:
    """/data/options.json -> the launcher -> the server converts the checkpoints in /share
    (standing in for the download): the preset voices of a CustomVoice model and a clone of
    a Base model, one list on `describe`, one decoder; a one-shot request speaks in each; the
    voice lab answers on the ingress port (its proxy peer named loopback here)."""
    for port in (PORT, INGRESS_PORT):
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                pytest.fail(f"port {port} is taken on this machine; the container shares its network", pytrace=False)
    data, share = tmp_path / "data", tmp_path / "share"
    data.mkdir()
    write_checkpoint(share / "tiny", "tiny", "custom_voice")
    write_checkpoint(share / "tiny-base", "tiny", "base")
    write_float_wav(share / "grandma.wav", speech_like(3 * 24000, 2))
    manifest = yaml.safe_load((ADDON / "config.yaml").read_text(encoding="utf-8"))
    options = {**manifest["options"], "voice": "narrator",
               "models": [{"source": "/share/wyoming-qwen3tts/tiny"}, {"source": "/share/wyoming-qwen3tts/tiny-base"}],
               "voices": [{"name": "narrator", "description": "Narrator", "speaker": "ryan", "language": "en"},
                          {"name": "grandma", "ref_audio": "grandma.wav", "ref_text": "Hello, this is grandma."}]}
    (data / "options.json").write_text(json.dumps(options), encoding="utf-8")
    log = tmp_path / "addon.log"
    with log.open("w") as out:
        proc = subprocess.Popen(["buildah", *STORAGE, "run", "--isolation", "chroot", "--env",
                                 "QWEN3TTS_INGRESS_PEERS=127.0.0.1",
                                 "--volume", f"{data}:/data", "--volume", f"{share}:/share/wyoming-qwen3tts:ro",
                                 container, "--", "/usr/local/bin/qwen3tts_addon.py", "serve"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"tcp://127.0.0.1:{PORT}"
    try:
        start = time.monotonic()
        info = wait_for_voices(proc, uri, log, start)
        ready_s = time.monotonic() - start
        voices = [voice.name for voice in info.tts[0].voices]
        assert "narrator" in voices and "ryan" in voices and voices[-1] == "grandma", voices
        # the image's health check, run in the container as Docker would
        in_container(container, "/usr/local/bin/qwen3tts_addon.py", "health", timeout=60)
        reply = speak_once_loaded(uri, "Hello from the add-on image.", "narrator", log, start)
        assert speak_once_loaded(uri, "Hello from grandma.", "grandma", log, start).seconds > 0
        lab = f"http://127.0.0.1:{INGRESS_PORT}"
        with urllib.request.urlopen(f"{lab}/", timeout=30) as page:
            assert page.status == 200 and b"<html" in page.read().lower()
        with urllib.request.urlopen(f"{lab}/api/voices", timeout=30) as listed:
            kinds = {v["name"]: v["kind"] for v in json.loads(listed.read())}
        assert kinds["ryan"] == "preset" and kinds["grandma"] == "config", kinds
        print(f"\nadd-on in the image: voices after {ready_s:.0f} s ({len(voices)}), audio after "
              f"{time.monotonic() - start:.0f} s (the model converted and loaded): one-shot {reply.seconds:.2f} s "
              f"of audio in {reply.total_s:.2f} s")
    finally:
        stop(proc)
    text = log.read_text()
    assert "starting: " in text and "--config /tmp/wyoming-qwen3tts/config.yaml" in text, text[-3000:]
    assert "--http 0.0.0.0:8099 --http-ingress" in text, text[-3000:]
    assert "decoder of" in text and "is shared (the same files)" in text, text[-3000:]  # compiled once
    assert "Traceback" not in text, text[-6000:]
    assert any((data / "converted").iterdir()), "the conversion was not written to /data"
