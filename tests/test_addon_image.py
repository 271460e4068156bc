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

Cached between runs under $QWEN3TTS_IMAGE_CACHE (default ~/.cache/wyoming-qwen3tts/addon-image):
the Debian root, the wheelhouse, the image's Python and the container storage (vfs). The built
image is removed at the end unless QWEN3TTS_IMAGE_KEEP=1 (vfs stores every layer whole).
"""
from __future__ import annotations

import asyncio
import glob
import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import tomllib
import yaml
from wyoming.client import AsyncClient
from wyoming.info import Describe, Info

from qwen3tts_tools.synthetic.writer import write_checkpoint
from wyoming_qwen3tts import __version__
from wyoming_qwen3tts.client import ClientError, synthesize

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
ADDON = REPO / "addon"
CACHE = Path(os.environ.get("QWEN3TTS_IMAGE_CACHE") or Path.home() / ".cache/wyoming-qwen3tts/addon-image")
KEEP_IMAGE = os.environ.get("QWEN3TTS_IMAGE_KEEP") == "1"
DEBIAN_MIRROR = os.environ.get("QWEN3TTS_DEBIAN_MIRROR", "http://deb.debian.org/debian")
IMAGE_PYTHON = "3.13"  # Debian 13's python3: the wheelhouse is downloaded for it
BASE_IMAGE = "localhost/qwen3tts-test/debian-trixie:latest"
IMAGE = "localhost/qwen3tts-test/addon:latest"
STORAGE = ["--root", str(CACHE / "storage"), "--runroot", str(CACHE / "runroot"), "--storage-driver", "vfs"]
PORT = 10200  # fixed in the add-on; a chroot-isolated container shares the host's network
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _run(cmd: list[str], timeout: float = 3600, **kwargs) -> subprocess.CompletedProcess:
    """Run a command; a failure fails the test with the end of its output."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    if done.returncode != 0:
        output = (done.stdout + done.stderr)[-6000:]
        pytest.fail(f"{' '.join(cmd[:6])} ... exited {done.returncode}:\n{output}", pytrace=False)
    return done


def _podman(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return _run(["podman", *STORAGE, *args], **kwargs)


def _buildah(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return _run(["buildah", *STORAGE, *args], **kwargs)


@pytest.fixture(scope="module")
def tools() -> None:
    """Fail, not skip: whoever runs an opt-in test asked for it."""
    missing = [tool for tool in ("podman", "buildah", "debootstrap") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: apt-get install -y podman buildah debootstrap",
                    pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("building the image needs root (debootstrap, chroot isolation)", pytrace=False)
    CACHE.mkdir(parents=True, exist_ok=True)


def _image_python() -> str:
    """An interpreter of the image's Python version on the host, to download its wheels."""
    candidates = [os.environ.get("QWEN3TTS_IMAGE_PYTHON"), shutil.which(f"python{IMAGE_PYTHON}"),
                  *sorted(glob.glob(str(Path.home() / f".pyenv/versions/{IMAGE_PYTHON}*/bin/python{IMAGE_PYTHON}")))]
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() == IMAGE_PYTHON:
            return candidate
    pytest.fail(f"no Python {IMAGE_PYTHON} on this machine to download the image's wheels with "
                f"(set QWEN3TTS_IMAGE_PYTHON)", pytrace=False)


@pytest.fixture(scope="module")
def base_image(tools: None) -> str:
    """Debian trixie from debootstrap, imported as the stand-in for Home Assistant's base image."""
    if subprocess.run(["podman", *STORAGE, "image", "exists", BASE_IMAGE]).returncode == 0:
        return BASE_IMAGE
    root = CACHE / "debian-trixie"
    if not root.is_dir():
        partial = CACHE / "debian-trixie.partial"
        shutil.rmtree(partial, ignore_errors=True)
        _run(["debootstrap", "--variant=minbase", "--include=ca-certificates", "trixie", str(partial),
              DEBIAN_MIRROR])
        partial.rename(root)
    archive = CACHE / "debian-trixie.tar"
    _run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(archive), "."])
    try:
        _podman("import", "--change", f"ENV {PATH_ENV}", "--change", 'CMD ["/bin/bash"]', str(archive), BASE_IMAGE)
    finally:
        archive.unlink()
    return BASE_IMAGE


def _requirements() -> list[str]:
    """What pip installs in the image: the package's dependencies, its conversion extra, and its
    build requirements (the native runner is compiled there)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    return sorted({*project["dependencies"], *project["optional-dependencies"]["convert"],
                   *pyproject["build-system"]["requires"]})


@pytest.fixture(scope="module")
def wheelhouse(tools: None) -> Path:
    """Wheels for the image's Python, downloaded on the host (whose pip reaches PyPI)."""
    requirements = _requirements()
    key = hashlib.sha256("\n".join([IMAGE_PYTHON, *requirements]).encode()).hexdigest()[:12]
    wheels = CACHE / f"wheels-py{IMAGE_PYTHON}-{key}"
    if wheels.is_dir():
        return wheels
    venv = CACHE / f"python{IMAGE_PYTHON}"
    if not (venv / "bin/python").exists():
        _run([_image_python(), "-m", "venv", str(venv)])
    partial = CACHE / "wheels.partial"
    shutil.rmtree(partial, ignore_errors=True)
    _run([str(venv / "bin/python"), "-m", "pip", "download", "--only-binary=:all:", "--dest", str(partial),
          *requirements])
    partial.rename(wheels)
    return wheels


def _working_tree() -> list[str]:
    """The repository's files as a clone of this working tree would have them: tracked and
    untracked-but-not-ignored files that exist."""
    listed = _run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]).stdout
    return sorted({name for name in listed.split("\0") if name and (REPO / name).is_file()})


def _source_archive(dest: Path) -> Path:
    """The working tree as GitHub's tag archive lays it out (one top folder), reproducibly
    (fixed times and order), so an unchanged tree gives the same bytes."""
    top = f"wyoming-qwen3tts-{__version__}"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in _working_tree():
            path = REPO / name
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = path.stat().st_size
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.mtime = 0
            with path.open("rb") as f:
                tar.addfile(info, f)
    archive = dest / f"{top}.tar.gz"
    with archive.open("wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return archive


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> tuple[Path, str]:
    """The add-on folder alone, as a clone has it, with the wheelhouse and the package's source
    archive in its wheels/ folder. Returns the context and the archive's URL inside the build."""
    ctx = tmp_path_factory.mktemp("addon-context") / "addon"
    for name in _working_tree():
        if name.startswith("addon/"):
            target = ctx / name.removeprefix("addon/")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target)
    assert (ctx / "Dockerfile").is_file() and (ctx / "config.yaml").is_file()
    assert not (ctx / "wheels").exists() or [p.name for p in (ctx / "wheels").iterdir()] == [".gitignore"]
    wheels = ctx / "wheels"
    wheels.mkdir(exist_ok=True)
    for wheel in wheelhouse.iterdir():
        try:
            os.link(wheel, wheels / wheel.name)
        except OSError:
            shutil.copy2(wheel, wheels / wheel.name)
    archive = _source_archive(wheels)
    return ctx, f"file:///tmp/wheels/{archive.name}"


@pytest.fixture(scope="module")
def image(base_image: str, context: tuple[Path, str]) -> Iterator[dict]:
    """Build as the Supervisor does: in the add-on folder, its Dockerfile, the Supervisor's
    build arguments; plus the offline ones. Yields what was measured."""
    ctx, package_url = context
    version = yaml.safe_load((ctx / "config.yaml").read_text(encoding="utf-8"))["version"]
    start = time.monotonic()
    _buildah("bud", "--isolation", "chroot", "--format", "docker", "--file", "Dockerfile", "--tag", IMAGE,
             "--build-arg", f"BUILD_FROM={base_image}", "--build-arg", f"BUILD_VERSION={version}",
             "--build-arg", "BUILD_ARCH=amd64",
             "--build-arg", "INTEL_DRIVERS=false", "--build-arg", "WHEELS_ONLY=true",
             "--build-arg", f"PACKAGE_URL={package_url}", ".", cwd=ctx)
    seconds = time.monotonic() - start
    inspect = json.loads(_podman("image", "inspect", IMAGE).stdout)[0]
    config = json.loads(_buildah("inspect", "--type", "image", IMAGE).stdout)["Docker"]["config"]
    measured = {"build_seconds": round(seconds, 1), "size_bytes": inspect["Size"], "version": version,
                "labels": config.get("Labels") or {}, "healthcheck": config.get("Healthcheck")}
    print(f"\nadd-on image: built in {seconds / 60:.1f} min, {inspect['Size'] / 1e9:.2f} GB")
    (CACHE / "last-build.json").write_text(json.dumps(measured, indent=2), encoding="utf-8")
    try:
        yield measured
    finally:
        if not KEEP_IMAGE:
            subprocess.run(["buildah", *STORAGE, "rmi", IMAGE], capture_output=True)


@pytest.fixture
def container(image: dict) -> Iterator[str]:
    cid = _buildah("from", "--pull-never", IMAGE).stdout.strip().splitlines()[-1]
    try:
        yield cid
    finally:
        subprocess.run(["buildah", *STORAGE, "rm", cid], capture_output=True)


def _in_container(cid: str, *command: str, mounts: tuple[str, ...] = (), timeout: float = 600) -> str:
    volumes = [arg for mount in mounts for arg in ("--volume", mount)]
    return _buildah("run", "--isolation", "chroot", *volumes, cid, "--", *command, timeout=timeout).stdout


def _info(uri: str) -> Info | None:
    async def ask() -> Info:
        async with AsyncClient.from_uri(uri, connect_timeout=2, read_timeout=5) as client:
            await client.write_event(Describe().event())
            return Info.from_event(await client.read_event())

    try:
        return asyncio.run(ask())
    except (OSError, asyncio.TimeoutError):
        return None


def _stop(proc: subprocess.Popen) -> None:
    """Stop the server and everything `buildah run` started (its own session)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # anything left in its process group
    except ProcessLookupError:
        pass


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
    out = _in_container(container, "/opt/venv/bin/python", "-c", checks).split("\n")
    assert out[:3] == [__version__, "[]", "[]"], out


def test_options_to_describe_to_audio(image: dict, container: str, tmp_path: Path) -> None:
    """/data/options.json -> the launcher -> the server converts the checkpoint in /share
    (standing in for the download), `describe` lists the voices, a one-shot request speaks."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", PORT)) == 0:
            pytest.fail(f"port {PORT} is taken on this machine; the container shares its network", pytrace=False)
    data, share = tmp_path / "data", tmp_path / "share"
    data.mkdir()
    write_checkpoint(share / "tiny", "tiny", "custom_voice")
    manifest = yaml.safe_load((ADDON / "config.yaml").read_text(encoding="utf-8"))
    options = {**manifest["options"], "model": "/share/wyoming-qwen3tts/tiny", "voice": "narrator",
               "voices": [{"name": "narrator", "description": "Narrator", "speaker": "ryan", "language": "en"}]}
    (data / "options.json").write_text(json.dumps(options), encoding="utf-8")
    log = tmp_path / "addon.log"
    with log.open("w") as out:
        proc = subprocess.Popen(["buildah", *STORAGE, "run", "--isolation", "chroot",
                                 "--volume", f"{data}:/data", "--volume", f"{share}:/share/wyoming-qwen3tts:ro",
                                 container, "--", "/usr/local/bin/qwen3tts_addon.py", "serve"],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    uri = f"tcp://127.0.0.1:{PORT}"
    try:
        start = time.monotonic()
        info = None
        while info is None or not info.tts or not info.tts[0].voices:
            assert proc.poll() is None, f"the add-on exited {proc.returncode}:\n{log.read_text()[-6000:]}"
            assert time.monotonic() - start < 900, f"no voices after 15 min:\n{log.read_text()[-6000:]}"
            time.sleep(1)
            info = _info(uri)
        ready_s = time.monotonic() - start
        voices = [voice.name for voice in info.tts[0].voices]
        assert "narrator" in voices and "ryan" in voices, voices
        # the image's health check, run in the container as Docker would
        _in_container(container, "/usr/local/bin/qwen3tts_addon.py", "health", timeout=60)
        while True:  # the request waits for the model up to the server's loading_wait, then NotReady
            try:
                reply = asyncio.run(synthesize(uri, "Hello from the add-on image.", voice="narrator", timeout=300))
                break
            except ClientError as e:
                assert e.code == "NotReady" and time.monotonic() - start < 900, f"{e}:\n{log.read_text()[-6000:]}"
        assert reply.events[0] == "audio-start" and reply.events[-1] == "audio-stop"
        assert reply.rate == 24000 and reply.width == 2 and reply.channels == 1
        assert len(reply.audio) > 0 and len(reply.audio) % 2 == 0
        print(f"\nadd-on in the image: voices after {ready_s:.0f} s ({len(voices)}), audio after "
              f"{time.monotonic() - start:.0f} s (the model converted and loaded): one-shot {reply.seconds:.2f} s "
              f"of audio in {reply.total_s:.2f} s")
    finally:
        _stop(proc)
    text = log.read_text()
    assert "starting: " in text and "--config /tmp/wyoming-qwen3tts/voices.yaml" in text, text[-3000:]
    assert "Traceback" not in text, text[-6000:]
    assert any((data / "converted").iterdir()), "the conversion was not written to /data"
