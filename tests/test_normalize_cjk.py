"""The Chinese, Japanese and Korean normalisers: Home Assistant's sentences and the cases CJK gets wrong easily.

The data files (tests/data/normalize/{zh,ja,ko}.yaml) hold each sentence with its spoken form written out; the
Korean native numbers are checked against num2words' own Korean ordinals, not against this project's code.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
import yaml
from num2words import num2words

from wyoming_qwen3tts.normalize import ja, ko, zh

DATA = Path(__file__).parent / "data" / "normalize"
MODULES = {"zh": zh, "ja": ja, "ko": ko}


def cases(language: str) -> list[dict[str, str]]:
    return list(yaml.safe_load((DATA / f"{language}.yaml").read_text(encoding="utf-8")))


def all_cases() -> list[tuple[str, str, str]]:
    return [(lang, c["text"], c["spoken"]) for lang in MODULES for c in cases(lang)]


@pytest.mark.parametrize("language", list(MODULES))
def test_data_files_hold_enough_home_assistant_sentences(language: str) -> None:
    entries = cases(language)
    assert all(set(e) == {"text", "spoken", "source"} for e in entries)
    from_ha = [e for e in entries if e["source"].startswith("responses/")]
    assert len(from_ha) >= 30
    assert any(e["source"] == "tricky" for e in entries)


@pytest.mark.parametrize(("language", "text", "spoken"), all_cases())
def test_sentence_is_said_as_written_out(language: str, text: str, spoken: str) -> None:
    assert MODULES[language].normalize(text) == spoken


@pytest.mark.parametrize(("language", "text", "spoken"), all_cases())
def test_spoken_form_is_stable(language: str, text: str, spoken: str) -> None:
    """Normalising what was already said changes nothing: no rule reads another rule's output again."""
    assert MODULES[language].normalize(spoken) == spoken


# Korean: which numeral system, the thing listeners notice

@pytest.mark.parametrize("value", [n for n in [*range(2, 100), 101, 137, 250, 999] if n % 100 != 20])
def test_korean_native_numbers_agree_with_num2words_ordinals(value: int) -> None:
    # num2words' ordinal is the native number before 번째 (두 번째, 스물한 번째, 백 서른일곱 번째);
    # its 20 reads 스물, not 스무
    assert ko.normalize(f"{value}번째") == num2words(value, lang="ko", to="ordinal")


@pytest.mark.parametrize(("text", "spoken"), [
    ("1시", "한 시"), ("4시", "네 시"), ("11시", "열한 시"), ("20시", "이십 시"), ("23:59", "이십삼 시 오십구 분"),
    ("20번째", "스무 번째"), ("1번째", "첫 번째"), ("2시간", "두 시간"), ("3명", "세 명"), ("4살", "네 살"),
    ("99개", "아흔아홉 개"), ("100개", "백 개"), ("101개", "백 한 개"), ("120개", "백 스무 개"),
    ("1005개", "천 다섯 개"),
    ("5분", "오분"), ("7초", "칠초"), ("3층", "삼층"), ("3번", "삼번"),
    ("5월", "오월"), ("6월", "유월"), ("10월", "시월"), ("7:05 AM", "오전 일곱 시 오 분"),
    ("오전 10:30:05", "오전 열 시 삼십 분 오 초"), ("00:30:00", "영 시 삼십 분"), ("오후 3시 반", "오후 세 시 반"),
    ("14시", "십사 시"), ("13시간", "열세 시간"), ("12개월", "십이개월"), ("3달", "세 달"),
])
def test_korean_hours_and_counters_take_native_or_sino_numbers(text: str, spoken: str) -> None:
    assert ko.normalize(text) == spoken


# Chinese: 两 and 二, years digit by digit

@pytest.mark.parametrize(("text", "spoken"), [
    ("2个", "两个"), ("2小时", "两小时"), ("2点", "两点"), ("2:00", "两点"), ("2号", "二号"), ("2月", "二月"),
    ("2层", "二层"), ("12个", "十二个"), ("22点", "二十二点"), ("2026年", "二零二六年"), ("3年", "三年"),
    ("12:00 AM", "凌晨十二点"), ("$1-5", "一到五美元"), ("€5-10", "五到十欧元"), ("25kg", "二十五千克"),
    ("第2个", "第二个"), ("第2点", "第二点"), ("5A级景区", "五A级景区"), ("电流 5 A", "电流 五安"),
    ("2002/01", "二零零二年一月"), ("2020-25", "二千零二十到二十五"),
    ("2:30 a.m", "上午两点三十分"), ("9:00pm", "下午九点"),
    ("12:30 PM", "中午十二点三十分"), ("14:05:09", "十四点零五分九秒"), ("14:00:05", "十四点零分五秒"),
])
def test_chinese_numbers_before_measure_words_and_years(text: str, spoken: str) -> None:
    assert zh.normalize(text) == spoken


# Japanese: slashes are dates when they can be

@pytest.mark.parametrize(("text", "spoken"), [
    ("12/25", "十二月二十五日"), ("13/25", "二十五分の十三"), ("1/32", "三十二分の一"),
    ("2026/12/04", "二千二十六年十二月四日"), ("2026.12.04", "二千二十六年十二月四日"),
])
def test_japanese_slash_is_a_date_or_a_fraction(text: str, spoken: str) -> None:
    assert ja.normalize(text) == spoken


# Forms a maintained speech text-normalisation suite's test data (docs/TEXT-cjk.md) gives the same way

@pytest.mark.parametrize(("language", "text", "spoken"), [
    ("ja", "0kg", "ゼロキロ"), ("ja", "0.05m", "零点零五メートル"), ("ja", "60km/h", "時速六十キロ"),
    ("ja", "50m/s", "秒速五十メートル"), ("ja", "30°C", "三十度"), ("ja", "午前0時14分", "午前零時十四分"),
    ("ja", "¥12.50", "十二円五十銭"), ("ja", "$0.99", "ゼロドル九十九セント"),
    ("ja", "12,345円", "一万二千三百四十五円"),
    ("ja", "2024/01/30", "二千二十四年一月三十日"), ("ja", "10時から18時", "十時から十八時"),
    ("ko", "오후3시30분", "오후 세 시 삼십 분"), ("ko", "14:05", "십사 시 오 분"), ("ko", "23:00", "이십삼 시"),
    ("ko", "24:03:38", "이십사 시 삼 분 삼십팔 초"), ("ko", "₩15000", "만오천원"), ("ko", "$ 200", "이백달러"),
    ("ko", "¥2000", "이천엔"), ("ko", "-3km", "마이너스 삼 킬로미터"),
    ("ko", "2024-07-23", "이천이십사 년 칠월 이십삼 일"),
    ("zh", "$100-500", "一百到五百美元"), ("zh", "38°C", "三十八摄氏度"), ("zh", "-1.2g", "负一点二克"),
    ("zh", "2002.01.28", "二零零二年一月二十八日"), ("zh", "于5:35:36发射", "于五点三十五分三十六秒发射"),
    ("zh", "增幅0.4%", "增幅百分之零点四"), ("zh", "210", "二百一十"),
])
def test_forms_a_reference_suite_says_the_same_way(language: str, text: str, spoken: str) -> None:
    assert MODULES[language].normalize(text) == spoken


# What the normalisers are unsure of stays as written

@pytest.mark.parametrize("language", list(MODULES))
@pytest.mark.parametrize("text", [
    "25:00", "11:75", "PM2.5", "RTX4090", "CO2", "Wi-Fi", "1" * 20, "1,234,567,890,123,456", "¥", "-", "", "v2",
    "A-1", "B2B",
])
def test_unsure_text_is_left_as_written(language: str, text: str) -> None:
    assert MODULES[language].normalize(text) == text


@pytest.mark.parametrize("language", list(MODULES))
def test_text_without_digits_or_symbols_is_unchanged(language: str) -> None:
    """What every language reads the same before the sentence's language is known (normalize/__init__.py)."""
    for text in ("客厅灯已打开，是的", "ライトがオンになりました。", "조명을 켰습니다, 네",
                 "中国vs日本 etc No Nr h min", "「はい」と言った", "下午好", "오후에 봐요"):
        assert MODULES[language].normalize(text) == text


@pytest.mark.parametrize(("language", "text"), [
    ("zh", "上午13:00"), ("ja", "午後13:00"), ("ko", "오후 13:00"), ("ko", "13:00 PM"),
])
def test_a_morning_or_afternoon_hour_past_twelve_is_left_as_written(language: str, text: str) -> None:
    assert MODULES[language].normalize(text) == text


@pytest.mark.parametrize(("language", "text", "spoken"), [
    ("zh", "Philips Hue 2 已打开，亮度80%", "Philips Hue 二 已打开，亮度百分之八十"),
    ("ja", "Philips Hue 2がオンになりました", "Philips Hue 二がオンになりました"),
    ("ko", "Philips Hue 2 조명을 켰습니다", "Philips Hue 이 조명을 켰습니다"),
    ("zh", "iPhone 15 电量 80 %", "iPhone 十五 电量 百分之八十"),
])
def test_latin_names_in_a_cjk_sentence_stay_readable(language: str, text: str, spoken: str) -> None:
    assert MODULES[language].normalize(text) == spoken


@pytest.mark.parametrize("language", list(MODULES))
def test_a_sentence_takes_well_under_a_millisecond(language: str) -> None:
    sentences = [c["text"] for c in cases(language)]
    normalize = MODULES[language].normalize
    normalize(sentences[0])
    start = time.perf_counter()
    for _ in range(5):
        for sentence in sentences:
            normalize(sentence)
    per_sentence = (time.perf_counter() - start) / (5 * len(sentences))
    assert per_sentence < 1e-3, f"{language}: {per_sentence * 1e6:.0f} µs per sentence"


@pytest.mark.parametrize("language", list(MODULES))
def test_any_text_is_said_without_an_error(language: str) -> None:
    """Digits, signs and units in any order, long runs included: a sentence never takes the server down."""
    alphabet = "0123456789０９.,:-/+%％°℃$€¥₩年月日点分时時시분개번째 CFkmWhPaAMvsNo."
    rng = random.Random(39)
    normalize = MODULES[language].normalize
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))
        assert isinstance(normalize(text), str)
    assert normalize("9" * 400 + "." + "9" * 400 + "%") == "9" * 400 + "." + "9" * 400 + "%"
