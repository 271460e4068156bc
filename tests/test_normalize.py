"""The text normaliser (wyoming_qwen3tts/normalize, docs/TEXT.md): every data file's sentences
(Home Assistant's own intent responses, filled, and the tricky cases), the streaming contract
(a sentence read out word by word equals the whole sentence read out), language detection, the
config key, and the hook-up into every path that speaks text."""
from __future__ import annotations

import asyncio
import dataclasses
import random
import re
from pathlib import Path

import pytest
import yaml

from wyoming_qwen3tts import normalize as norm
from wyoming_qwen3tts.config import ConfigError, ServerConfig, ServerSettings, apply_overrides
from wyoming_qwen3tts.normalize import LANGUAGES, SentenceNormalizer, held_back, language_code, speak
from wyoming_qwen3tts.normalize.detect import detect
from wyoming_qwen3tts.say import main as say_main
from wyoming_qwen3tts.server.text import SentenceSplitter
from wyoming_qwen3tts.server.text import normalize as clean
from wyoming_qwen3tts.server.text_stream import SentenceStream

DATA = Path(__file__).parent / "data" / "normalize"
MINE = ("en", "de", "fr", "es", "it", "pt", "ru")  # this module's languages (zh, ja, ko: test_normalize_cjk.py)


def rows(code: str) -> list[dict[str, str]]:
    loaded = yaml.safe_load((DATA / f"{code}.yaml").read_text(encoding="utf-8"))
    assert isinstance(loaded, list) and loaded, code
    return loaded


FILES = sorted(p.stem for p in DATA.glob("*.yaml"))
CASES = [(code, row["text"], row["spoken"]) for code in FILES for row in rows(code)]


# --- the data files ---------------------------------------------------------------------------


def test_every_language_of_this_module_has_its_data():
    for code in MINE:
        assert code in FILES, code
        data = rows(code)
        from_ha = [r for r in data if r["source"].startswith(f"responses/{code}/")]
        assert len(from_ha) >= 30, (code, len(from_ha))
        assert all(set(r) == {"text", "spoken", "source"} for r in data), code
        assert {r["source"] for r in data} - {"tricky"} <= {r["source"] for r in from_ha}


@pytest.mark.parametrize(("code", "text", "spoken"), CASES, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(CASES)])
def test_data_file_sentence(code, text, spoken):
    assert code in LANGUAGES
    assert speak(text, code) == spoken


@pytest.mark.parametrize(("code", "text", "spoken"), [
    # "1.000": a thousand in German, one (point zero zero zero) in English
    ("de", "Es sind 1.000 Watt", "Es sind eintausend Watt"),
    ("de", "Es sind 1.000,5 Liter", "Es sind eintausend Komma fünf Liter"),
    ("en", "It is 1.000 times better", "It is one point zero zero zero times better"),
    ("en", "It is 1,000 times better", "It is one thousand times better"),
    # "3/4": a fraction, or a date after a word that introduces one, else left as written
    ("en", "Add 3/4 of it", "Add three quarters of it"),
    ("en", "The meeting is on 3/4", "The meeting is on March fourth"),
    ("fr", "Le 3/4 il pleut", "Le trois avril il pleut"),
    ("en", "Score 7/5 here", "Score 7/5 here"),
    # "12:00"
    ("en", "It is 12:00", "It is twelve o'clock"),
    ("de", "Es ist 12:00 Uhr", "Es ist zwölf Uhr"),
    ("es", "Son las 12:00", "Son las doce en punto"),
    # 12 hours with AM/PM
    ("en", "The alarm is at 2:30 PM.", "The alarm is at two thirty P M."),
    ("de", "Um 2:30 PM", "Um vierzehn Uhr dreißig"),
    # versions, IP addresses, phone numbers
    ("en", "Version 1.2.3 and v2.1", "Version one dot two dot three and version two dot one"),
    ("de", "Die 192.168.1.10", "Die einhundertzweiundneunzig Punkt einhundertachtundsechzig Punkt eins Punkt zehn"),
    ("en", "Call +49 30 1234567", "Call plus four nine, three zero, one two three four five six seven"),
    ("de", "Ruf 030 1234567 an", "Ruf null drei null, eins zwei drei vier fünf sechs sieben an"),
    # below zero
    ("ru", "Ночью -12 °C", "Ночью минус двенадцать градусов Цельсия"),
    ("it", "Stanotte -1 °C", "Stanotte meno un grado Celsius"),
    # No. / Nr. / vs.
    ("en", "It is No. 7", "It is number seven"),
    ("de", "Das ist Nr. 7", "Das ist Nummer sieben"),
    ("en", "Bayern vs. Dortmund", "Bayern versus Dortmund"),
    ("fr", "PSG vs. OM", "PSG contre OM"),
    # gender and number follow the unit
    ("de", "Noch 1 Stunde und 1 kWh", "Noch eine Stunde und eine Kilowattstunde"),
    ("es", "Quedan 21 días y 1 hora", "Quedan veintiún días y una hora"),
    ("ru", "21 °C, 22 °C, 25 °C, 21,5 °C", "двадцать один градус Цельсия, двадцать два градуса Цельсия, "
     "двадцать пять градусов Цельсия, двадцать одна целая пять десятых градуса Цельсия"),
    ("fr", "1,5 degré et 2 degrés", "un virgule cinq degré et deux degrés"),
    # what no rule is sure of stays as written
    ("en", "PM2.5 and mp3 and H2O", "PM2.5 and mp3 and H2O"),
])
def test_tricky(code, text, spoken):
    assert speak(text, code) == spoken


@pytest.mark.parametrize("code", MINE)
def test_text_without_digits_or_symbols_is_unchanged(code):
    """Rule 1 of the contract: what every language reads the same before its language is known."""
    module = __import__(f"wyoming_qwen3tts.normalize.{code}", fromlist=["normalize"])
    for text in ("Turned on the lights", "Das Licht ist an, oder nicht?", "«Oui» dit-elle — d'accord…",
                 "Свет включён", "etc vs No Nr h min"):
        assert module.normalize(text) == text


@pytest.mark.parametrize("code", MINE)
def test_any_text_is_read_or_left_never_an_error(code):
    """Random digits and symbols (what an LLM may write) never raise; a number too long to say is
    left as written."""
    rng = random.Random(code)
    alphabet = "0123456789.,:/-+ °%€$£kmWhCFaApPMº№#No"
    for _ in range(2000):
        speak("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 25))), code)
    assert speak("ID 99999999999999999999999999999999999999999999", code) == \
        "ID 99999999999999999999999999999999999999999999"
    plus = __import__(f"wyoming_qwen3tts.normalize.{code}", fromlist=["LANGUAGE"]).LANGUAGE.plus
    assert speak("+5 °C", code) == f"{plus} {speak('5 °C', code)}"


def test_a_failing_module_leaves_the_sentence_as_written(monkeypatch, caplog):
    from wyoming_qwen3tts.normalize import en

    def bug(sentence: str) -> str:
        raise RuntimeError("a bug")

    monkeypatch.setattr(en, "normalize", bug)
    assert speak("It is 21 °C", "en") == "It is 21 °C"
    assert "the en normaliser failed" in caplog.text


def test_a_language_without_a_module_is_left_as_written(caplog):
    norm._modules.pop("xx", None)
    assert speak("It is 21 °C", "xx") == "It is 21 °C"
    assert "no text normaliser for language 'xx'" in caplog.text


# --- streaming: read out word by word == the whole sentence read out -----------------------------


def streamed(pieces: list[str], language: str | None, detector=None) -> list[str]:
    """What SentenceStream gives for each sentence, its fragments joined."""
    spoken = SentenceNormalizer("auto", language)
    if detector is not None:
        spoken._detector = detector
    stream = SentenceStream(spoken=spoken)
    said: list[str] = []
    for fragment in [f for p in pieces for f in stream.push(p)] + stream.flush():
        if fragment.sentence == len(said):
            said.append("")
        said[fragment.sentence] += fragment.text
    return said


def whole_sentences(pieces: list[str], code: str) -> list[str]:
    """What the sentence-at-a-time path says for the same pieces (the splitter's sentences depend
    on where pieces end: "e." and "g." apart split)."""
    splitter = SentenceSplitter()
    raw = [s for p in pieces for s in splitter.push(p)] + splitter.flush()
    return [speak(s, code) for s in (clean(r, 10_000) for r in raw) if s]


def _words(text: str) -> list[str]:
    parts = re.split(r"(\s+)", text)
    return [parts[0]] + [parts[i] + parts[i + 1] for i in range(1, len(parts) - 1, 2)]


@pytest.mark.parametrize("code", FILES)
def test_streamed_sentences_read_out_as_whole_ones(code):
    """Every data sentence fed word by word, and in random pieces, comes out exactly as the whole
    sentence read out (so the held-back prefix is always final: the contract holds for every rule)."""
    rng = random.Random(code)
    for row in rows(code):
        text = row["text"]
        splits = [_words(text), list(text)]
        for _ in range(3):
            cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 8))))
            splits.append([text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])])
        for pieces in splits:
            assert streamed(pieces, code) == whole_sentences(pieces, code), (code, pieces)


def test_a_number_holds_back_the_words_it_may_read_ahead():
    stream = SentenceStream(spoken=SentenceNormalizer("auto", "de"))
    got = []
    for piece in ["Es ", "sind ", "1 ", "Stunde ", "und ", "mehr ", "als ", "genug."]:
        got.append("".join(f.text for f in stream.push(piece)))
    got.append("".join(f.text for f in stream.flush()))
    # "1" waits until LOOKAHEAD words follow it without a digit or symbol: "Stunde und mehr"
    assert got == ["Es", " sind", "", "", "", " eine Stunde und mehr", " als", " genug.", ""]


def test_held_back():
    assert held_back("It is 21,5 °C in the") == "It is"  # "21,5" may still be followed by a unit
    assert held_back("It is 21,5 °C in the living room") == "It is 21,5 °C in the living room"
    assert held_back("Turned on the lights ") == "Turned on the lights"
    assert held_back("No. 5") == ""
    assert held_back("客厅温度是21度") == "客厅温度是"  # a CJK character is a token of its own


def test_a_streamed_sentence_keeps_the_language_chosen_at_its_first_digit():
    calls = []

    def detector(text: str, wait: bool) -> str | None:
        calls.append(text)
        return "de" if len(calls) == 1 else "en"

    said = streamed(["Es sind ", "1.000 ", "Watt ", "jetzt ", "hier ", "drin."], None, detector)
    assert said == ["Es sind eintausend Watt jetzt hier drin."]
    assert calls == ["Es sind 1.000 Watt jetzt hier"]  # once, when "1.000" was given out


# --- which language ---------------------------------------------------------------------------


@pytest.mark.parametrize(("code", "text"), [
    ("en", "The living room temperature is 21 degrees and it is sunny."),
    ("de", "Die Temperatur im Wohnzimmer beträgt 21 Grad und es ist sonnig."),
    ("fr", "La température du salon est de 21 degrés et il fait beau."),
    ("es", "La temperatura del salón es de 21 grados y hace sol."),
    ("it", "La temperatura del soggiorno è di 21 gradi ed è soleggiato."),
    ("pt", "A temperatura da sala é de 21 graus e está sol."),
    ("ru", "Температура в гостиной 21 градус, солнечно."),
    ("zh", "客厅的温度是二十一度，天气晴朗。"),
    ("ja", "リビングの温度は二十一度で、晴れです。"),
    ("ko", "거실 온도는 21도이고 맑습니다."),
])
def test_detection(code, text):
    assert detect(text) == code


def test_detection_of_mixed_text_and_short_text():
    assert detect("Spotify spielt jetzt im Wohnzimmer die Playlist Chill Vibes.") == "de"
    assert detect("21 °C") is None  # too few letters to tell
    spoken = SentenceNormalizer("auto", None)
    assert spoken.sentence("Im Wohnzimmer sind es jetzt 21,5 °C.") == "Im Wohnzimmer sind es jetzt einundzwanzig " \
                                                                      "Komma fünf Grad Celsius."
    assert spoken.sentence("21 °C") == "einundzwanzig Grad Celsius"  # too short: the last language


def test_modes_and_language_names(caplog):
    assert SentenceNormalizer("off", "de").sentence("21,5 °C") == "21,5 °C"
    with caplog.at_level("DEBUG", logger="wyoming_qwen3tts.normalize"):
        assert SentenceNormalizer("auto", "de", "req 1").sentence("21,5 °C") == "einundzwanzig Komma fünf Grad Celsius"
    assert "req 1: normalised (de): '21,5 °C' → 'einundzwanzig Komma fünf Grad Celsius'" in caplog.text
    assert [language_code(n) for n in ("english", "German", "en-US", "pt_BR", "auto", None, "klingon")] == \
        ["en", "de", "en", "pt", None, None, None]


# --- config, CLI ------------------------------------------------------------------------------


def test_config_key():
    assert ServerConfig().server.normalize_text == "auto"
    assert apply_overrides(ServerConfig(), normalize_text="off").server.normalize_text == "off"
    with pytest.raises(ConfigError, match="normalize_text"):
        ServerSettings(normalize_text="maybe").validate()
    documented = yaml.safe_load((Path(__file__).parents[1] / "config.yaml").read_text(encoding="utf-8"))
    assert documented["server"]["normalize_text"] == "auto"


def test_say_show_text(capsys):
    assert say_main(["--show-text", "--language", "de", "Es sind 21,5 °C. Der Wecker klingelt um 14:30 Uhr!"]) == 0
    assert capsys.readouterr().out == "Es sind einundzwanzig Komma fünf Grad Celsius.\n" \
                                      "Der Wecker klingelt um vierzehn Uhr dreißig!\n"
    assert say_main(["--show-text", "It is 2:30 PM and 21 °C outside."]) == 0  # detected: English
    assert capsys.readouterr().out == "It is two thirty P M and twenty one degrees Celsius outside.\n"
    assert say_main(["--show-text", "--language", "tlh", "Hi 2"]) == 2


# --- hook-up: what the engine is given on every path -------------------------------------------


@pytest.fixture(scope="module")
def server(converted_factory, tmp_path_factory):
    from test_server import tiny_server
    yield from tiny_server(converted_factory, tmp_path_factory)


@pytest.fixture
def given(monkeypatch):
    """The texts handed to responses (Speech.add_text: a fragment or, through Speech.add, a
    whole sentence)."""
    from wyoming_qwen3tts.server.speech import Speech
    texts: list[str] = []
    add_text = Speech.add_text

    def spy(self, text, end):
        texts.append(text)
        add_text(self, text, end)

    monkeypatch.setattr(Speech, "add_text", spy)
    return texts


TEXT = "It is 21.5 °C now."
SAID = "It is twenty one point five degrees Celsius now."


def _wyoming(server, streaming: bool) -> None:
    from test_server import run
    from test_server_errors import ha_reply
    data = {"text": TEXT, "voice": {"name": "ryan", "language": "en"}}
    events = run(ha_reply(server.port, data, streaming=streaming))
    assert "error" not in [e.type for e in events]


@pytest.mark.parametrize("streaming", [False, True])
def test_wyoming_paths_speak_the_spoken_form(server, given, streaming):
    _wyoming(server, streaming)
    assert "".join(given) == SAID


def test_off_speaks_the_text_as_written(server, given, monkeypatch):
    monkeypatch.setattr(server.slot, "settings", dataclasses.replace(server.slot.settings, normalize_text="off"))
    _wyoming(server, streaming=True)
    assert "".join(given) == TEXT


def test_http_path_speaks_the_spoken_form(server, given):
    from wyoming_qwen3tts.server.http_speech import pcm_stream

    async def speak_http() -> int:
        audio = await pcm_stream(server.slot, TEXT, "ryan", "en")
        return sum([len(chunk) async for chunk in audio])

    assert asyncio.run_coroutine_threadsafe(speak_http(), server.loop).result(60) > 0
    assert given == [SAID]


def test_the_benchmark_runs_over_every_data_file(capsys):
    """python -m qwen3tts_tools.bench.normalize (a measurement, not a timed test: one pass)."""
    from qwen3tts_tools.bench.normalize import main as bench
    assert bench(["--repeat", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[2:]] == FILES
    assert all(len(line.split()) == 10 for line in lines[2:])
