"""Building and running the project's images here, offline, for the opt-in image tests
(test_addon_image.py, test_container_image.py): buildah and podman on vfs storage with chroot
isolation, a Debian trixie root from `debootstrap` standing in for a base image that cannot be
pulled, and a wheelhouse downloaded on the host for the image's Python (a container build
here reaches Debian's mirror but not PyPI or GitHub).

Cached between runs under $QWEN3TTS_IMAGE_CACHE (default ~/.cache/wyoming-qwen3tts/images):
the Debian root, the wheelhouses, the image's Python and the container storage (vfs).
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
import subprocess
import tarfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import tomllib
from wyoming.client import AsyncClient
from wyoming.info import Describe, Info

from wyoming_qwen3tts import __version__
from wyoming_qwen3tts.client import ClientError, Reply, synthesize

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("QWEN3TTS_IMAGE_CACHE") or Path.home() / ".cache/wyoming-qwen3tts/images")
KEEP_IMAGE = os.environ.get("QWEN3TTS_IMAGE_KEEP") == "1"
DEBIAN_MIRROR = os.environ.get("QWEN3TTS_DEBIAN_MIRROR", "http://deb.debian.org/debian")
IMAGE_PYTHON = "3.13"  # Debian 13's python3: the wheelhouse is downloaded for it
BASE_IMAGE = "localhost/qwen3tts-test/debian-trixie:latest"
STORAGE = ["--root", str(CACHE / "storage"), "--runroot", str(CACHE / "runroot"), "--storage-driver", "vfs"]
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def run(cmd: list[str], timeout: float = 3600, **kwargs) -> subprocess.CompletedProcess:
    """Run a command; a failure fails the test with the end of its output."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    if done.returncode != 0:
        output = (done.stdout + done.stderr)[-6000:]
        pytest.fail(f"{' '.join(cmd[:6])} ... exited {done.returncode}:\n{output}", pytrace=False)
    return done


def podman(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return run(["podman", *STORAGE, *args], **kwargs)


def buildah(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return run(["buildah", *STORAGE, *args], **kwargs)


def check_tools() -> None:
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


def base_image() -> str:
    """Debian trixie from debootstrap, imported as the stand-in for the images' base image."""
    if subprocess.run(["podman", *STORAGE, "image", "exists", BASE_IMAGE]).returncode == 0:
        return BASE_IMAGE
    root = CACHE / "debian-trixie"
    if not root.is_dir():
        partial = CACHE / "debian-trixie.partial"
        shutil.rmtree(partial, ignore_errors=True)
        run(["debootstrap", "--variant=minbase", "--include=ca-certificates", "trixie", str(partial),
             DEBIAN_MIRROR])
        partial.rename(root)
    archive = CACHE / "debian-trixie.tar"
    run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(archive), "."])
    try:
        podman("import", "--change", f"ENV {PATH_ENV}", "--change", 'CMD ["/bin/bash"]', str(archive), BASE_IMAGE)
    finally:
        archive.unlink()
    return BASE_IMAGE


def requirements(extras: Iterable[str] = ("convert",)) -> list[str]:
    """What pip installs in an image: the package's dependencies, those of `extras`, and its
    build requirements (the native runner is compiled there)."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    optional = [req for extra in extras for req in project["optional-dependencies"][extra]]
    return sorted({*project["dependencies"], *optional, *pyproject["build-system"]["requires"]})


# Pure-Python dependencies published as an sdist only: docopt (num2words' command line needs it).
SOURCE_ONLY = ("docopt",)


def wheelhouse(reqs: list[str]) -> Path:
    """Wheels for the image's Python, downloaded on the host (whose pip reaches PyPI)."""
    key = hashlib.sha256("\n".join([IMAGE_PYTHON, *reqs]).encode()).hexdigest()[:12]
    wheels = CACHE / f"wheels-py{IMAGE_PYTHON}-{key}"
    if wheels.is_dir():
        return wheels
    venv = CACHE / f"python{IMAGE_PYTHON}"
    if not (venv / "bin/python").exists():
        run([_image_python(), "-m", "venv", str(venv)])
    partial = CACHE / "wheels.partial"
    shutil.rmtree(partial, ignore_errors=True)
    # `pip wheel` saves the published wheels as they are and builds one for each sdist-only
    # dependency the image could not build offline (SOURCE_ONLY; nothing else from source)
    run([str(venv / "bin/python"), "-m", "pip", "wheel", "--only-binary=:all:",
         *[f"--no-binary={name}" for name in SOURCE_ONLY], "--wheel-dir", str(partial), *reqs])
    partial.rename(wheels)
    return wheels


def working_tree() -> list[str]:
    """The repository's files as a clone of this working tree would have them: tracked and
    untracked-but-not-ignored files that exist."""
    listed = run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]).stdout
    return sorted({name for name in listed.split("\0") if name and (REPO / name).is_file()})


def copy_tree(dest: Path, prefix: str = "") -> Path:
    """The working tree's files under `prefix` (all of them by default), copied to `dest` as a
    fresh clone has them: a build context without build trees or caches."""
    for name in working_tree():
        if name.startswith(prefix):
            target = dest / name.removeprefix(prefix)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target)
    return dest


def link_wheels(wheels: Path, folder: Path) -> None:
    """The wheelhouse put into a build context's wheels folder (hard links when possible)."""
    assert not folder.exists() or [p.name for p in folder.iterdir()] == [".gitignore"], "wheels/ is not empty"
    folder.mkdir(exist_ok=True)
    for wheel in wheels.iterdir():
        try:
            os.link(wheel, folder / wheel.name)
        except OSError:
            shutil.copy2(wheel, folder / wheel.name)


def source_archive(dest: Path) -> Path:
    """The working tree as GitHub's tag archive lays it out (one top folder), reproducibly
    (fixed times and order), so an unchanged tree gives the same bytes."""
    top = f"wyoming-qwen3tts-{__version__}"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in working_tree():
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


def build(image: str, context: Path, dockerfile: str, build_args: dict[str, str], record: str) -> Iterator[dict]:
    """`buildah bud` (docker format, so HEALTHCHECK is kept); yields what was measured and
    writes it to CACHE/<record>; removes the image afterwards unless QWEN3TTS_IMAGE_KEEP=1 (vfs
    stores every layer whole, so no intermediate layers are kept either). A module-scoped
    fixture's body."""
    args = [arg for key, value in build_args.items() for arg in ("--build-arg", f"{key}={value}")]
    start = time.monotonic()
    buildah("bud", "--isolation", "chroot", "--format", "docker", "--file", dockerfile, "--tag", image,
            *args, ".", cwd=context)
    seconds = time.monotonic() - start
    inspect = json.loads(podman("image", "inspect", image).stdout)[0]
    config = json.loads(buildah("inspect", "--type", "image", image).stdout)["Docker"]["config"]
    measured = {"build_seconds": round(seconds, 1), "size_bytes": inspect["Size"],
                "labels": config.get("Labels") or {}, "healthcheck": config.get("Healthcheck"), "config": config}
    print(f"\n{image}: built in {seconds / 60:.1f} min, {inspect['Size'] / 1e9:.2f} GB")
    (CACHE / record).write_text(json.dumps(measured, indent=2), encoding="utf-8")
    try:
        yield measured
    finally:
        if not KEEP_IMAGE:
            subprocess.run(["buildah", *STORAGE, "rmi", image], capture_output=True)


def working_container(image: str) -> Iterator[str]:
    """A buildah working container of `image`, removed afterwards (a fixture's body)."""
    cid = buildah("from", "--pull-never", image).stdout.strip().splitlines()[-1]
    try:
        yield cid
    finally:
        subprocess.run(["buildah", *STORAGE, "rm", cid], capture_output=True)


def in_container(cid: str, *command: str, mounts: tuple[str, ...] = (), timeout: float = 600,
                 options: tuple[str, ...] = ()) -> str:
    """Run a command in the working container (chroot isolation: the host's network)."""
    volumes = [arg for mount in mounts for arg in ("--volume", mount)]
    return buildah("run", "--isolation", "chroot", *options, *volumes, cid, "--", *command, timeout=timeout).stdout


def wyoming_info(uri: str) -> Info | None:
    """The server's answer to `describe`, or None while nothing answers with one."""
    async def ask() -> Info | None:
        async with AsyncClient.from_uri(uri, connect_timeout=2, read_timeout=5) as client:
            await client.write_event(Describe().event())
            event = await client.read_event()  # None: closed unanswered (the voice list not known yet)
            return None if event is None else Info.from_event(event)

    try:
        return asyncio.run(ask())
    except (OSError, asyncio.TimeoutError):
        return None


def stop(proc: subprocess.Popen) -> None:
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


def wait_for_voices(proc: subprocess.Popen, uri: str, log: Path, start: float, bound_s: float = 900) -> Info:
    """The info of the server in the container once it lists voices (it may be converting)."""
    info = None
    while info is None or not info.tts or not info.tts[0].voices:
        assert proc.poll() is None, f"the container exited {proc.returncode}:\n{log.read_text()[-6000:]}"
        assert time.monotonic() - start < bound_s, f"no voices after {bound_s:.0f} s:\n{log.read_text()[-6000:]}"
        time.sleep(1)
        info = wyoming_info(uri)
    return info


def speak_once_loaded(uri: str, text: str, voice: str, log: Path, start: float, bound_s: float = 900) -> Reply:
    """A one-shot request, repeated while the server says NotReady (a request waits for the
    model up to the server's loading_wait); the reply checked for a whole 24 kHz s16 stream."""
    while True:
        try:
            reply = asyncio.run(synthesize(uri, text, voice=voice, timeout=300))
            break
        except ClientError as e:
            assert e.code == "NotReady" and time.monotonic() - start < bound_s, f"{e}:\n{log.read_text()[-6000:]}"
    assert reply.events[0] == "audio-start" and reply.events[-1] == "audio-stop"
    assert reply.rate == 24000 and reply.width == 2 and reply.channels == 1
    assert len(reply.audio) > 0 and len(reply.audio) % 2 == 0
    return reply
