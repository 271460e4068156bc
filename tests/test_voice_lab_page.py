"""The voice lab page (wyoming_qwen3tts/server/page/) in a real browser against the real server
process (docs/HTTP.md, "The page"): Debian's Chromium driven by Playwright, a WAV file as the microphone.

Record -> streamed preview -> save -> the voice in Wyoming `describe` and speaking over Wyoming;
an upload of every format the page accepts; errors shown next to their control; rename; delete;
the notice where the microphone cannot work (an insecure origin); a preset speaker given a style
(a 1.7B CustomVoice model); screenshots for docs/.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_server import free_port
from wyoming.asr import Transcript
from wyoming.audio import AudioChunk, AudioStop
from wyoming.event import Event
from wyoming.info import AsrModel, AsrProgram, Attribution, Describe, Info
from wyoming.server import AsyncEventHandler, AsyncTcpServer

from wyoming_qwen3tts.client import describe, synthesize

pytestmark = pytest.mark.e2e

DOCS = Path(__file__).resolve().parents[1] / "docs"
RATE = 24000
INSECURE_HOST = "voicelab.test"  # mapped to 127.0.0.1 inside Chromium only: a name, so not a secure context
# (file extension, PyAV container format, encoder): every format the page offers to upload
FORMATS = [("wav", "wav", "pcm_s16le"), ("flac", "flac", "flac"), ("mp3", "mp3", "libmp3lame"),
           ("ogg", "ogg", "libopus"), ("m4a", "ipod", "aac"), ("webm", "webm", "libopus"), ("mp4", "mp4", "aac")]
HEARD = "the fake recogniser heard {seconds:.1f} seconds"


def speechlike(seconds: float, rate: int = RATE) -> np.ndarray:
    """Voiced sound with syllables (harmonics of a gliding pitch, a 4 Hz envelope), float32 in
    [-1, 1]: what the server's checks (not silent, long enough) and the encoders accept as a voice."""
    t = np.arange(int(seconds * rate)) / rate
    pitch = 120 + 30 * np.sin(2 * np.pi * 0.5 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 12))
    envelope = 0.3 + 0.7 * np.abs(np.sin(2 * np.pi * 2 * t))
    noise = np.random.default_rng(0).normal(0, 0.01, t.size)
    return (0.25 * voiced * envelope / 2 + noise).astype(np.float32)


def write_clip(path: Path, container: str, codec: str, seconds: float = 4.0) -> Path:
    """The clip in `container`/`codec`, encoded by PyAV (FFmpeg), resampled to what the encoder takes."""
    import av

    samples = speechlike(seconds)
    with av.open(str(path), "w", format=container) as out:
        stream = out.add_stream(codec, rate=48000 if "opus" in codec else RATE, layout="mono")
        resampler = av.AudioResampler(format=stream.codec_context.format, layout="mono",
                                      rate=stream.codec_context.sample_rate)
        frame = av.AudioFrame.from_ndarray(samples[None, :], format="flt", layout="mono")
        frame.sample_rate = RATE
        for piece in resampler.resample(frame) + resampler.resample(None):
            out.mux(stream.encode(piece))
        out.mux(stream.encode(None))
    return path


class FakeAsr:
    """A Wyoming speech-to-text server that answers how many seconds of audio it was sent, so the
    test can tell the page's Transcribe sent the clip through (server.asr)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self._server = AsyncTcpServer("127.0.0.1", self.port)
        asyncio.run_coroutine_threadsafe(self._server.start(FakeAsrHandler), self.loop).result(10)

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


class FakeAsrHandler(AsyncEventHandler):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.samples = 0.0

    async def handle_event(self, event: Event) -> bool:
        if Describe.is_type(event.type):
            attribution = Attribution(name="test", url="http://127.0.0.1/")
            model = AsrModel(name="fake", description="fake", attribution=attribution, installed=True,
                             languages=["en"], version="1")
            await self.write_event(Info(asr=[AsrProgram(name="fake", description="fake", attribution=attribution,
                                                        installed=True, models=[model], version="1")]).event())
        elif AudioChunk.is_type(event.type):
            chunk = AudioChunk.from_event(event)
            self.samples += len(chunk.audio) / (chunk.width * chunk.channels * chunk.rate)
        elif AudioStop.is_type(event.type):
            await self.write_event(Transcript(text=HEARD.format(seconds=self.samples)).event())
            return False
        return True


class LabServer:
    """`wyoming-qwen3tts --http` as a process, with a tiny model; `voices` is config.yaml's voice
    list (a Base or VoiceDesign model has no preset speakers, and a server needs a voice to serve)."""

    def __init__(self, model: Path, data: Path, voices: str, *flags: str, token: str | None = None) -> None:
        self.port, self.http_port, self.token = free_port(), free_port(), token
        self.uri = f"tcp://127.0.0.1:{self.port}"
        self.url = f"http://127.0.0.1:{self.http_port}/"
        config = data / "config.yaml"
        config.write_text(f"engine:\n  max_frames: 48\nvoices:\n{voices}", encoding="utf-8")
        self.log_path = data / "server.log"
        with open(self.log_path, "w", encoding="utf-8") as log:
            # many small codec calls: the preview's WAV arrives in many pieces, as a long one would
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "wyoming_qwen3tts", "--model", str(model), "--uri", self.uri,
                 "--http", f"127.0.0.1:{self.http_port}", "--config", str(config), "--data-dir", str(data / "data"),
                 "--greedy", "--threads", "1", "--first-chunk", "1", "--steady-chunk", "2", *flags,
                 *(["--http-token", token] if token else [])], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while not self.ready():
            assert self.proc.poll() is None, self.log()
            assert time.monotonic() < deadline, f"the server did not come up:\n{self.log()}"
            time.sleep(0.2)

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "api/health", timeout=2) as response:
                return bool(json.load(response)["ready"])
        except (OSError, ValueError):
            return False

    def api(self, path: str) -> Any:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        with urllib.request.urlopen(urllib.request.Request(self.url + path, headers=headers), timeout=10) as response:
            return json.load(response)

    def voice_names(self) -> set[str]:
        return {v["name"] for v in self.api("api/voices")}

    def describe_names(self) -> set[str]:
        info = off_thread(describe(self.port))
        assert info is not None, "the Wyoming server did not answer describe"
        return {v.name for v in info.tts[0].voices}

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def off_thread(coro: Any) -> Any:
    """Runs a coroutine on its own thread: Playwright's sync API owns this thread's event loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, asyncio.wait_for(coro, 120)).result()


def serving(server: LabServer) -> Iterator[LabServer]:
    try:
        yield server
    finally:
        server.close()
        log = server.log()
        assert "Traceback" not in log, log


@pytest.fixture(scope="module")
def lab(converted_factory, tmp_path_factory) -> Iterator[LabServer]:
    """A Base model (it clones) and a speech-to-text server for Transcribe; no token (loopback)."""
    asr = FakeAsr()
    try:
        data = tmp_path_factory.mktemp("lab")
        write_clip(data / "reference.wav", "wav", "pcm_s16le")
        yield from serving(LabServer(converted_factory("tiny", "base", "int8"), data,
                                     "  - name: reference\n    ref_audio: reference.wav\n    x_vector_only: true\n",
                                     "--asr", f"tcp://127.0.0.1:{asr.port}"))
    finally:
        asr.close()


@pytest.fixture(scope="module")
def design_lab(converted_factory, tmp_path_factory) -> Iterator[LabServer]:
    """A VoiceDesign model (voices from words, no cloning) behind a token, as a standalone server."""
    yield from serving(LabServer(converted_factory("tiny", "voice_design", "int8"), tmp_path_factory.mktemp("design"),
                                 '  - name: narrator\n    instruct: "A calm, deep voice."\n', token="s3cret-token"))


@pytest.fixture(scope="module")
def style_lab(converted_factory, tmp_path_factory) -> Iterator[LabServer]:
    """A 1.7B CustomVoice model (its preset speakers take a style), with a styled voice in config.yaml."""
    yield from serving(LabServer(converted_factory("tiny-1.7b", "custom_voice", "int8"),
                                 tmp_path_factory.mktemp("style"),
                                 '  - name: narrator\n    speaker: ryan\n    instruct: "Speak slowly."\n'))


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> dict[str, Path]:
    """Every upload format, the fake microphone's WAV, a file that is not audio, a too-short clip."""
    folder = tmp_path_factory.mktemp("clips")
    out = {ext: write_clip(folder / f"voice.{ext}", container, codec) for ext, container, codec in FORMATS}
    out["microphone"] = write_clip(folder / "microphone.wav", "wav", "pcm_s16le", seconds=8.0)
    out["short"] = write_clip(folder / "short.wav", "wav", "pcm_s16le", seconds=1.0)
    bad = folder / "not-audio.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEthis is not a wave file at all" * 50)
    out["bad"] = bad
    return out


@pytest.fixture(scope="module")
def browser(clips):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[test]'")
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("Debian's chromium is not installed (apt-get install chromium); Playwright's own browser "
                    "download is not used")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=[
            "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
            f"--use-file-for-fake-audio-capture={clips['microphone']}", "--autoplay-policy=no-user-gesture-required",
            f"--host-resolver-rules=MAP {INSECURE_HOST} 127.0.0.1"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser, lab):
    """A fresh page of the lab, loaded and ready; fails the test on any uncaught script error."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(lab.url)
    page.wait_for_selector("body[data-ready=true]", timeout=30_000)
    yield page
    context.close()
    assert not errors, errors


def visible_error(page, error_id: str) -> str:
    locator = page.locator(f"#{error_id}")
    locator.wait_for(state="visible", timeout=60_000)
    return locator.text_content() or ""


def shown_error(page) -> str:
    """The one error on show: by Record and Upload when the server refused the file as audio
    (413, 415), else by the button that sent it (a 422 names the audio's problem in words)."""
    shown = page.locator("#audio-error:visible, #save-error:visible")
    shown.wait_for(timeout=60_000)
    return shown.text_content() or ""


def save(page, name: str, description: str = "") -> None:
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Description", exact=True).fill(description)
    page.get_by_role("button", name="Save", exact=True).click()


def wait_for_row(page, name: str) -> None:
    page.locator(f"#voice-rows tr[data-voice='{name}']").wait_for(timeout=120_000)


def streams(page) -> list[dict]:
    return page.evaluate("window.voiceLabStats.streams")


def test_record_preview_save_and_speak_over_wyoming(page, lab):
    record, stop = page.get_by_role("button", name="Record", exact=True), page.get_by_role("button", name="Stop",
                                                                                           exact=True)
    assert stop.is_disabled()
    record.click()
    page.wait_for_function("document.getElementById('level').value > 0.05")  # the meter follows the microphone
    page.wait_for_function("document.getElementById('countdown').textContent.includes('s left')")  # past 3 s
    stop.click()
    page.locator("#clip-row").wait_for()
    assert "Your recording" in page.locator("#clip-label").text_content()
    assert page.evaluate("document.getElementById('clip-player').src").startswith("blob:")

    page.get_by_label("Transcript", exact=True).fill("One two three four, this is my voice for the lab.")
    page.get_by_label("Sample sentence").fill("The kitchen lights are off and the front door is locked.")
    page.get_by_role("button", name="Preview", exact=True).click()
    page.locator("#preview-row").wait_for(timeout=120_000)
    (preview,) = streams(page)
    assert preview["ended"] and preview["error"] is None, preview
    # streamed: pieces were playing before the response's last byte arrived
    assert preview["piecesBeforeLastByte"] >= 4, preview  # ~24 codec calls; one late burst would be 1-3 reads
    assert preview["bytes"] > 44 + 2 * RATE // 2, preview  # the header and at least half a second

    save(page, "Recorded", "my own voice")
    wait_for_row(page, "Recorded")
    assert page.locator("#save-error").is_hidden()
    row = page.locator("#voice-rows tr[data-voice='Recorded']")
    assert "Cloned" in row.text_content() and "my own voice" in row.text_content()
    assert "Recorded" in lab.describe_names()
    reply = off_thread(synthesize(lab.uri, "Hello from the voice lab.", voice="Recorded"))
    assert reply.rate == RATE and len(reply.audio) > RATE  # over half a second of s16

    row.get_by_role("button", name="Play").click()  # the list's Play streams /api/speak
    page.wait_for_function("window.voiceLabStats.streams.length === 2 && window.voiceLabStats.streams[1].ended")
    assert streams(page)[1]["pieces"] >= 2 and streams(page)[1]["error"] is None

    page.screenshot(path=str(DOCS / "voice-lab-desktop.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(DOCS / "voice-lab-phone.png"), full_page=True)


@pytest.mark.parametrize("ext", [f[0] for f in FORMATS])
def test_an_upload_of_each_format_saves(page, lab, clips, ext):
    page.get_by_label("Upload", exact=True).set_input_files(str(clips[ext]))
    assert page.locator("#clip-label").text_content() == f"Uploaded: voice.{ext}"
    page.get_by_label("No transcript").check()  # a timbre-only clone: no words needed
    assert page.get_by_label("Transcript", exact=True).is_disabled()
    save(page, f"upload {ext}")
    wait_for_row(page, f"upload {ext}")
    assert page.locator("#audio-error").is_hidden() and page.locator("#save-error").is_hidden()
    assert f"upload {ext}" in lab.describe_names()


def test_a_bad_file_shows_its_error_and_saves_nothing(page, lab, clips):
    before = lab.voice_names()
    page.get_by_label("Upload", exact=True).set_input_files(str(clips["bad"]))
    page.get_by_label("No transcript").check()
    save(page, "broken")
    assert "decode" in shown_error(page)
    page.get_by_label("Upload", exact=True).set_input_files(str(clips["short"]))
    page.get_by_role("button", name="Save", exact=True).click()
    assert "at least 3 s" in shown_error(page)
    assert lab.voice_names() == before and "broken" not in lab.describe_names()
    # a missing transcript is the page's own error, next to the transcript, without a request
    page.get_by_label("I type what it says").check()
    page.get_by_label("Transcript", exact=True).fill("")
    page.get_by_role("button", name="Preview", exact=True).click()
    assert "Type what the clip says" in visible_error(page, "transcript-error")


def test_transcribe_asks_the_speech_to_text_server(page, clips):
    page.get_by_label("Upload", exact=True).set_input_files(str(clips["wav"]))
    page.get_by_role("button", name="Transcribe").click()
    page.wait_for_function("document.getElementById('transcript').value.startsWith('the fake recogniser heard')")
    heard = float(page.get_by_label("Transcript", exact=True).input_value().split()[-2])
    assert abs(heard - 4.0) < 0.2  # the whole clip went to the recogniser


def test_rename_then_delete(page, lab, clips):
    page.get_by_label("Upload", exact=True).set_input_files(str(clips["flac"]))
    page.get_by_label("No transcript").check()
    save(page, "Before")
    wait_for_row(page, "Before")
    row = page.locator("#voice-rows tr[data-voice='Before']")
    row.get_by_role("button", name="Rename").click()
    page.keyboard.press("Escape")  # keyboard: Escape cancels, the focus is back on the row's buttons
    assert page.evaluate("document.activeElement.getAttribute('aria-label')") == "Play Before"
    row.get_by_role("button", name="Rename").focus()
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == row.get_by_label("New name for Before").get_attribute("id")
    page.keyboard.press("Control+A")
    page.keyboard.type("After")
    page.keyboard.press("Enter")
    wait_for_row(page, "After")
    page.wait_for_function("document.activeElement.getAttribute('aria-label') === 'Play After'")
    assert "Before" not in lab.voice_names() and {"After"} <= lab.describe_names() - {"Before"}

    row = page.locator("#voice-rows tr[data-voice='After']")
    row.get_by_role("button", name="Delete").click()
    row.get_by_role("button", name="Cancel").click()  # asked first; cancelling keeps it
    assert "After" in lab.voice_names()
    row.get_by_role("button", name="Delete").click()
    row.get_by_role("button", name="Yes, delete").click()
    page.locator("#voice-rows tr[data-voice='After']").wait_for(state="detached")
    assert "After" not in lab.voice_names() and "After" not in lab.describe_names()


def test_an_insecure_origin_says_how_to_record_and_upload_still_works(browser, lab, clips):
    """Chromium treats 127.0.0.1 and localhost as secure; a host name mapped to 127.0.0.1 by its
    resolver rules is a plain-http origin like a LAN address, so the microphone is withheld."""
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    try:
        page.goto(f"http://{INSECURE_HOST}:{lab.http_port}/")
        page.wait_for_selector("body[data-ready=true]", timeout=30_000)
        assert page.evaluate("window.isSecureContext") is False
        note = page.locator("#mic-note")
        assert note.is_visible() and "https" in note.text_content()
        assert page.get_by_role("button", name="Record", exact=True).count() == 0
        page.get_by_label("Upload", exact=True).set_input_files(str(clips["mp3"]))
        page.get_by_label("No transcript").check()
        save(page, "from http")
        wait_for_row(page, "from http")
        assert "from http" in lab.describe_names()
    finally:
        context.close()


def test_the_page_is_served_with_relative_urls(lab):
    """Under ingress the page lives below a path prefix: no URL in it may start at the root."""
    with urllib.request.urlopen(lab.url, timeout=10) as response:
        html = response.read().decode()
    assert 'src="static/' in html and 'href="static/' in html and '="/' not in html
    scripts = (Path(__file__).resolve().parents[1] / "wyoming_qwen3tts/server/page/static").glob("*.js")
    for script in scripts:
        code = script.read_text(encoding="utf-8")
        assert '"/api' not in code and "'/api" not in code and "`/api" not in code, script.name


def test_design_a_voice_from_words_behind_a_token(browser, design_lab):
    """A VoiceDesign model: the page offers only a description; the server wants a token, which
    the page takes from ?token= once (and drops from the address bar), or asks for when it is stale."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        page.goto(f"{design_lab.url}?token={design_lab.token}")
        page.wait_for_selector("body[data-ready=true]", timeout=30_000)
        assert "token" not in page.url
        assert page.locator("#from-recording").is_hidden()  # this model cannot clone
        page.get_by_label("Voice description").fill("a calm, warm voice, late thirties")
        page.get_by_role("button", name="Preview", exact=True).click()
        page.locator("#preview-row").wait_for(timeout=120_000)
        assert page.locator("#compare-clip").is_hidden()  # no clip to compare with
        (preview,) = streams(page)
        assert preview["ended"] and preview["error"] is None and preview["piecesBeforeLastByte"] >= 4, preview
        save(page, "Warm", "designed in the lab")
        wait_for_row(page, "Warm")
        assert "Designed" in page.locator("#voice-rows tr[data-voice='Warm']").text_content()
        assert "Warm" in design_lab.describe_names()
        reply = off_thread(synthesize(design_lab.uri, "A designed voice speaks.", voice="Warm"))
        assert len(reply.audio) > RATE

        # the owner changed the token: the stored one is refused, the page asks once, then works
        page.evaluate("localStorage.setItem('voiceLabToken', 'stale')")
        page.reload()
        dialog = page.get_by_role("dialog", name="Access token")
        dialog.wait_for()
        dialog.get_by_label("Token").fill(design_lab.token)
        dialog.get_by_role("button", name="Use token").click()
        page.wait_for_selector("body[data-ready=true]", timeout=30_000)
        assert page.evaluate("localStorage.getItem('voiceLabToken')") == design_lab.token
        wait_for_row(page, "Warm")
    finally:
        context.close()


@pytest.mark.parametrize("can_clone, can_design, can_style", [(False, False, False), (True, True, False),
                                                               (True, False, True)])
def test_what_the_page_offers_follows_what_the_server_can(browser, lab, can_clone, can_design, can_style):
    """A 0.6B CustomVoice model makes no voices; a server with a Base and a VoiceDesign model makes
    both kinds; one with a Base and a 1.7B CustomVoice model clones and styles. The real server's
    /api/info, with those abilities changed on the way."""
    context = browser.new_context()
    page = context.new_page()
    speakers = [{"speaker": "ryan", "description": "Ryan (English, dynamic male)"},
                {"speaker": "uncle_fu", "description": "Uncle Fu (Chinese, seasoned male)"}]

    def info(route):
        body = route.fetch().json()
        assert body["can_style"] is False and body["speakers"] == []  # a Base model
        route.fulfill(json={**body, "can_clone": can_clone, "can_design": can_design, "can_style": can_style,
                            "speakers": speakers if can_style else []})

    try:
        page.route("**/api/info", info)
        page.goto(lab.url)
        page.wait_for_selector("body[data-ready=true]", timeout=30_000)
        if not (can_clone or can_design or can_style):
            assert page.locator("#cannot-make").is_visible() and page.locator("#make-body").is_hidden()
            assert page.get_by_role("button", name="Play reference").is_visible()  # the list still plays
            return
        choice = page.get_by_role("group", name="Make it from")
        assert choice.is_visible() and page.get_by_label("Voice description").is_hidden()
        assert page.locator("#from-style").is_hidden()
        assert choice.get_by_label("A description in words").is_visible() == can_design
        assert choice.get_by_label("A preset speaker with a style").is_visible() == can_style
        if can_style:  # by keyboard: the arrow keys move through the offered ways, Tab into the fields
            choice.get_by_label("A recording").focus()
            page.keyboard.press("ArrowDown")
            assert choice.get_by_label("A preset speaker with a style").is_checked()
            assert page.locator("#from-style").is_visible() and page.locator("#from-recording").is_hidden()
            page.keyboard.press("Tab")
            assert page.evaluate("document.activeElement.id") == "speaker"
            page.keyboard.press("Tab")
            assert page.evaluate("document.activeElement.id") == "style"
            speaker = page.get_by_role("combobox", name="Speaker", exact=True)
            assert speaker.locator("option").all_text_contents() == [s["description"] for s in speakers]
            assert page.get_by_role("textbox", name="Style instruction", exact=True).is_visible()
        else:
            choice.get_by_label("A description in words").check()
            assert page.get_by_label("Voice description").is_visible() and page.locator("#from-recording").is_hidden()
        choice.get_by_label("A recording").check()
        assert page.get_by_role("button", name="Record", exact=True).is_visible()
        assert page.locator("#from-style").is_hidden() and page.locator("#from-description").is_hidden()
    finally:
        context.close()


def test_every_control_has_its_accessible_name(page):
    """The names the issue gives (screen readers and tests find the controls by them); a row's
    Delete is found by name in test_rename_then_delete."""
    for role, name in [("button", "Record"), ("button", "Stop"), ("button", "Upload"), ("textbox", "Transcript"),
                       ("button", "Preview"), ("button", "Save"), ("textbox", "Name"), ("combobox", "Language"),
                       ("textbox", "Description"), ("textbox", "Sample sentence"), ("meter", "Microphone level"),
                       ("status", None), ("table", "Every voice the server speaks with")]:
        assert page.get_by_role(role, name=name, exact=True).count() == 1, (role, name)
    unnamed = page.evaluate("""[...document.querySelectorAll('button, input, select, textarea, meter, audio')]
        .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                       && !e.getAttribute('aria-labelledby') && !(e.tagName === 'BUTTON' && e.textContent.trim()))
        .map((e) => e.outerHTML)""")
    assert unnamed == []


def test_a_preset_speaker_with_a_style(browser, style_lab):
    """A 1.7B CustomVoice model: the page offers only the third way. A speaker and a style are
    previewed (streamed), saved, listed as Styled with the speaker and style, spoken over
    Wyoming and deleted; a missing style is the page's own error, a bad name the server's."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(style_lab.url)
        page.wait_for_selector("body[data-ready=true]", timeout=30_000)
        assert page.locator("#source-choice").is_hidden() and page.locator("#from-recording").is_hidden()
        assert page.locator("#from-description").is_hidden() and page.locator("#from-style").is_visible()
        speaker = page.get_by_role("combobox", name="Speaker", exact=True)
        assert "Ryan (English" in speaker.text_content()
        speaker.select_option("aiden")
        page.get_by_role("button", name="Preview", exact=True).click()
        assert "how the speaker should speak" in visible_error(page, "style-error")
        assert streams(page) == []  # nothing was asked of the server

        page.get_by_role("textbox", name="Style instruction", exact=True).fill("Excited, a little breathless.")
        page.get_by_role("button", name="Preview", exact=True).click()
        page.locator("#preview-row").wait_for(timeout=120_000)
        assert page.locator("#compare-clip").is_hidden() and page.locator("#style-error").is_hidden()
        (preview,) = streams(page)
        assert preview["ended"] and preview["error"] is None and preview["piecesBeforeLastByte"] >= 4, preview

        save(page, "../aiden")
        assert "a name starts with" in visible_error(page, "save-error")
        assert "../aiden" not in style_lab.voice_names()
        save(page, "Eager Aiden", "Aiden, excited")
        wait_for_row(page, "Eager Aiden")
        row = page.locator("#voice-rows tr[data-voice='Eager Aiden']")
        assert "Styled" in row.text_content() and "Aiden: Excited, a little breathless." in row.text_content()
        assert "Eager Aiden" in style_lab.describe_names()
        reply = off_thread(synthesize(style_lab.uri, "A styled voice speaks.", voice="Eager Aiden"))
        assert len(reply.audio) > RATE
        page.screenshot(path=str(DOCS / "voice-lab-style.png"), full_page=True)

        row.get_by_role("button", name="Delete").click()
        row.get_by_role("button", name="Yes, delete").click()
        page.locator("#voice-rows tr[data-voice='Eager Aiden']").wait_for(state="detached")
        assert "Eager Aiden" not in style_lab.voice_names() and "Eager Aiden" not in style_lab.describe_names()
    finally:
        context.close()
    assert not errors, errors


def test_a_refused_sample_sentence_is_shown_without_a_recording(browser, style_lab):
    """A sample sentence over server.max_text_chars is a 413 from the preview; where no recording
    is involved (a styled or a designed voice) the refusal is shown next to Preview, not in the
    Record and Upload error of the hidden recording way (where the user never saw it)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        page.goto(style_lab.url)
        page.wait_for_selector("body[data-ready=true]", timeout=30_000)
        page.get_by_role("textbox", name="Style instruction", exact=True).fill("Calm.")
        page.get_by_label("Sample sentence").fill("Lights off. " * 500)  # 6000 characters
        page.get_by_role("button", name="Preview", exact=True).click()
        assert "longer than 5000 characters" in visible_error(page, "preview-error")
        assert page.locator("#audio-error").text_content() == ""
        assert page.get_by_role("button", name="Preview", exact=True).is_enabled()
    finally:
        context.close()
