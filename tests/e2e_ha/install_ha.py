"""Install Home Assistant core for the end-to-end tests, in its own venv, cached.

    python tests/e2e_ha/install_ha.py            # prints the venv's python and the ffmpeg it found

Home Assistant needs Python >= 3.13; this machine's python3.13 comes from pyenv. The venv
lives under the cache directory (QWEN3TTS_E2E_CACHE, default /work/cache) as
ha-venv-<version>, and a stamp file makes a second call return at once. Everything is
installed with HA's own `homeassistant/package_constraints.txt` as pip constraints:
homeassistant itself, the requirements of every integration the tests' Home Assistant sets
up (the wyoming integration, tts, assist_pipeline, conversation, the default integrations
HA always loads, and their dependencies, from their manifest.json files), and an ffmpeg
binary from PyPI (imageio-ffmpeg) for tts's format conversion. Any failure raises
InstallError with pip's last lines: the tests fail on it, they do not skip.
"""
from __future__ import annotations

import fcntl
import glob
import json
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

HA_VERSION = os.environ.get("QWEN3TTS_E2E_HA_VERSION", "2026.2.3")  # the newest release for Python 3.13
CACHE = Path(os.environ.get("QWEN3TTS_E2E_CACHE", "/work/cache"))
EXTRA_PACKAGES = ["imageio-ffmpeg"]  # a static ffmpeg (with an MP3 encoder) as a wheel
# integrations configuration.yaml names (see ha_harness.CONFIGURATION), plus the wyoming
# integration and what the custom conversation agent depends on
CONFIGURED_DOMAINS = ["http", "api", "websocket_api", "config", "onboarding", "auth", "ffmpeg", "tts",
                      "assist_pipeline", "conversation", "wyoming", "logger"]
PIP_TIMEOUT_S = 1800
STAMP_FORMAT = 1


class InstallError(RuntimeError):
    pass


@dataclass(frozen=True)
class HaInstall:
    python: Path  # the venv's interpreter
    ffmpeg: Path
    version: str


def find_python() -> Path:
    """A Python 3.13 (QWEN3TTS_E2E_PYTHON, python3.13 on PATH, or pyenv's)."""
    if explicit := os.environ.get("QWEN3TTS_E2E_PYTHON"):
        return Path(explicit)
    candidates = [shutil.which("python3.13")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.13*/bin/python3.13")), reverse=True)
    candidates += sorted(glob.glob("/root/.pyenv/versions/3.13*/bin/python3.13"), reverse=True)
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            probe = subprocess.run([candidate, "-c", "import sys, venv; print(sys.version_info[:2])"],
                                   capture_output=True, text=True)
            if probe.returncode == 0 and probe.stdout.strip() == "(3, 13)":
                return Path(candidate)
    raise InstallError("no Python 3.13 found (Home Assistant needs one): set QWEN3TTS_E2E_PYTHON")


def _run(argv: list[str], log: Path, what: str, timeout: float = PIP_TIMEOUT_S) -> str:
    with log.open("a", encoding="utf-8") as out:
        out.write(f"\n$ {' '.join(map(str, argv))}\n")
        out.flush()
        try:
            done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=timeout, cwd=str(CACHE))
        except subprocess.TimeoutExpired:
            raise InstallError(f"{what}: no result after {timeout:.0f} s (log: {log})") from None
        out.write(done.stdout)
    if done.returncode != 0:
        lines = [line for line in done.stdout.splitlines() if not line.startswith("WARNING: Location")]
        raise InstallError(f"{what} failed (exit {done.returncode}; log: {log}):\n" + "\n".join(lines[-30:]))
    return done.stdout


def _pip(python: Path, args: list[str], log: Path, what: str, ignore_requires_python: bool) -> str:
    argv = [str(python), "-m", "pip", "--disable-pip-version-check", *args]
    if ignore_requires_python and args[0] in ("install", "download"):
        argv.insert(5, "--ignore-requires-python")
    return _run(argv, log, what)


# Run inside the HA venv: the pip requirements of the integrations HA will set up, following
# each manifest's dependencies (after_dependencies load only when configured themselves).
_CLOSURE = r"""
import json, sys
from pathlib import Path
import homeassistant.bootstrap as b
import homeassistant.components as c
roots = set(json.loads(sys.argv[1])) | b.CORE_INTEGRATIONS | b.DEFAULT_INTEGRATIONS | b.CRITICAL_INTEGRATIONS
roots |= b.LOGGING_AND_HTTP_DEPS_INTEGRATIONS - {"sentry", "isal"}
base = Path(c.__file__).parent
seen, todo, reqs = set(), list(roots), []
while todo:
    domain = todo.pop()
    if domain in seen:
        continue
    seen.add(domain)
    manifest = base / domain / "manifest.json"
    if not manifest.exists():
        continue
    data = json.loads(manifest.read_text())
    reqs += data.get("requirements", [])
    todo += data.get("dependencies", [])
print(json.dumps({"domains": sorted(seen), "requirements": sorted(set(reqs))}))
"""


def ensure(version: str = HA_VERSION) -> HaInstall:
    """The installed Home Assistant (installing it on the first call)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    venv = CACHE / f"ha-venv-{version}"
    python = venv / "bin" / "python"
    stamp = venv / ".qwen3tts-e2e-installed.json"
    wanted = {"format": STAMP_FORMAT, "version": version, "extra": EXTRA_PACKAGES, "domains": CONFIGURED_DOMAINS}
    with open(CACHE / f"ha-venv-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer at a time
        if stamp.exists() and python.exists():
            recorded = json.loads(stamp.read_text())
            if {k: recorded.get(k) for k in wanted} == wanted:
                return HaInstall(python, Path(recorded["ffmpeg"]), version)
        return _install(version, venv, python, stamp, wanted)


def _install(version: str, venv: Path, python: Path, stamp: Path, wanted: dict) -> HaInstall:
    log = CACHE / f"ha-install-{version}.log"
    log.write_text(f"installing homeassistant {version}\n", encoding="utf-8")
    base = find_python()
    if not python.exists():
        _run([str(base), "-m", "venv", str(venv)], log, "creating the venv")
    # the wheel first: its package_constraints.txt constrains everything installed after
    wheels = CACHE / "ha-wheels"
    wheels.mkdir(exist_ok=True)
    _pip(python, ["download", "--no-deps", "--only-binary=:all:", "-d", str(wheels), f"homeassistant=={version}"],
         log, f"downloading homeassistant {version}", ignore_requires_python=True)
    (wheel,) = wheels.glob(f"homeassistant-{version}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        constraints_text = archive.read("homeassistant/package_constraints.txt").decode()
        metadata = archive.read(f"homeassistant-{version}.dist-info/METADATA").decode()
    constraints = CACHE / f"ha-constraints-{version}.txt"
    constraints.write_text(constraints_text, encoding="utf-8")
    requires = next((line.split(":", 1)[1].strip() for line in metadata.splitlines()
                     if line.startswith("Requires-Python:")), "")
    base_version = subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                                  capture_output=True, text=True).stdout.strip()
    from packaging.specifiers import SpecifierSet
    ignore = bool(requires) and base_version not in SpecifierSet(requires)
    if ignore:  # pyenv's 3.13.0 against HA's >=3.13.2: a patch-level floor, installed regardless
        with log.open("a") as out:
            out.write(f"note: Python {base_version} is outside homeassistant's Requires-Python {requires}; "
                      "installing with --ignore-requires-python\n")
    _pip(python, ["install", "-c", str(constraints), str(wheel)], log, f"installing homeassistant {version}", ignore)
    closure = subprocess.run([str(python), "-c", _CLOSURE, json.dumps(CONFIGURED_DOMAINS)],
                             capture_output=True, text=True, cwd=str(CACHE))
    if closure.returncode != 0:
        raise InstallError(f"reading the integrations' manifests failed:\n{closure.stderr[-3000:]}")
    needed = json.loads(closure.stdout)
    with log.open("a") as out:
        out.write(f"integrations: {' '.join(needed['domains'])}\nrequirements: {' '.join(needed['requirements'])}\n")
    _pip(python, ["install", "-c", str(constraints), *needed["requirements"], *EXTRA_PACKAGES], log,
         "installing the integrations' requirements", ignore)
    ffmpeg = Path(subprocess.run([str(python), "-c", "import imageio_ffmpeg; print(imageio_ffmpeg.get_ffmpeg_exe())"],
                                 capture_output=True, text=True, cwd=str(CACHE)).stdout.strip())
    encoders = subprocess.run([str(ffmpeg), "-hide_banner", "-encoders"], capture_output=True, text=True)
    if "libmp3lame" not in encoders.stdout:
        raise InstallError(f"{ffmpeg} has no MP3 encoder (libmp3lame)")
    check = subprocess.run([str(python), "-c", "import homeassistant.const as c; print(c.__version__)"],
                           capture_output=True, text=True, cwd=str(CACHE))
    if check.stdout.strip() != version:
        raise InstallError(f"homeassistant {version} does not import: {check.stdout}{check.stderr[-2000:]}")
    stamp.write_text(json.dumps({**wanted, "ffmpeg": str(ffmpeg), "python": base_version,
                                 "ignored_requires_python": requires if ignore else None}), encoding="utf-8")
    return HaInstall(python, ffmpeg, version)


if __name__ == "__main__":
    try:
        installed = ensure(sys.argv[1] if len(sys.argv) > 1 else HA_VERSION)
    except InstallError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
    print(f"homeassistant {installed.version}: {installed.python}\nffmpeg: {installed.ffmpeg}")
