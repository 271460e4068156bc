"""Korean: Sino-Korean numbers from num2words, native numbers for hours and counters (docs/TEXT-cjk.md)."""

from __future__ import annotations

from decimal import Decimal

from num2words import CONVERTER_CLASSES, num2words

from .cjk import START, Speaker, plain, rule, run, shared_rules

# num2words' table from Sino-Korean words to native forms before a counter (일 -> 한, 이십 -> 스물);
# its ordinals use it, but it has no native cardinal of its own.
_NATIVE = CONVERTER_CLASSES["ko"].ords
# Counters that take native numbers (세 개, 두 시간, 다섯 명); every other counter takes Sino-Korean ones
# (삼 분, 이 층, 오 번).
_NATIVE_COUNTERS = "개(?!월)|명|시간|살|마리|번째|가지|잔|병|권|군데|곳|달"  # 개월 (months) is Sino-Korean
# Months that drop a sound: 유월 (not 육월), 시월 (not 십월).
_MONTHS = {6: "유월", 10: "시월"}
_LIBRARY_CURRENCIES = CONVERTER_CLASSES["ko"].CURRENCY_FORMS


def hour(value: int) -> str:
    """A clock hour: native from one to twelve (세 시, 열두 시), Sino-Korean on the 24-hour side (영 시, 십사 시)."""
    return native(value) if 1 <= value <= 12 else sino(value)


def sino(value: int) -> str:
    return str(num2words(value, lang="ko"))


def native(value: int) -> str:
    """A count as said before a counter (한, 두, 스무, 스물한): the last two digits native, hundreds and more
    Sino-Korean (백 한 개, 백 개), zero Sino-Korean (영)."""
    if value >= 100:
        rest = value % 100
        return sino(value - rest) + (" " + native(rest) if rest else "")
    if value == 0:
        return sino(value)
    if value == 20:
        return "스무"
    tens, ones = divmod(value, 10)
    return (_NATIVE[sino(tens * 10)] if tens else "") + (_NATIVE[sino(ones)] if ones else "")


class Korean(Speaker):
    point = " 점 "
    to = "에서 "  # "이십에서 이십오 도" (부터 wants a 까지 after it)
    sign_for_yen = "JPY"
    plus = "플러스 "
    label = "{} 번"
    versus = "대"
    degree_word = "도"
    halves = {"am": "오전 ", "pm": "오후 "}
    slash_dates = True  # 12/4 is the 4th of December
    percent_words = "{} 퍼센트"
    units = {
        "km/h": "시속 {} 킬로미터", "m/s": "초속 {} 미터", "kWh": "{} 킬로와트시", "Wh": "{} 와트시",
        "MW": "{} 메가와트", "kW": "{} 킬로와트", "W": "{} 와트", "hPa": "{} 헥토파스칼", "mbar": "{} 밀리바",
        "Pa": "{} 파스칼", "m²": "{} 제곱미터", "m³": "{} 세제곱미터", "mm": "{} 밀리미터", "cm": "{} 센티미터",
        "km": "{} 킬로미터", "m": "{} 미터", "kg": "{} 킬로그램", "mg": "{} 밀리그램", "g": "{} 그램",
        "ml": "{} 밀리리터", "mL": "{} 밀리리터", "L": "{} 리터", "lx": "{} 럭스", "V": "{} 볼트",
        "mA": "{} 밀리암페어", "A": "{} 암페어", "Hz": "{} 헤르츠", "dB": "{} 데시벨", "ppm": "{} 피피엠",
        "µg/m³": "세제곱미터당 {} 마이크로그램", "μg/m³": "세제곱미터당 {} 마이크로그램", "min": "{} 분",
        "h": "{} 시간", "GB": "{} 기가바이트", "MB": "{} 메가바이트", "Mbps": "{} 메가비피에스",
    }
    currencies = {"KRW": "{}원", "USD": "{}달러", "EUR": "{} 유로", "GBP": "{} 파운드", "JPY": "{}엔",
                  "CNY": "{} 위안"}
    cents = {"EUR": " {}센트", "GBP": " {}펜스"}

    def money(self, written: str, code: str) -> str:
        """num2words says the currencies it knows (만이천오백원, 오달러 구십구센트); the others say the amount."""
        value = plain(written)
        forms = _LIBRARY_CURRENCIES.get(code)
        fraction = value.partition(".")[2]
        # whole amounts only where it has no cents (it would say "$200" 이백달러 영센트), cents where it has them
        if forms and len(fraction) <= 2 and (bool(forms[1]) if fraction.strip("0") else not forms[1]):
            return str(num2words(Decimal(value), lang="ko", to="currency", currency=code))
        return super().money(written, code)

    def number(self, written: str) -> str:
        """num2words says the integer part; decimals are said digit by digit as written (1.000: 일 점 영영영)."""
        sign = "마이너스 " if written.startswith("-") else ""
        whole, _, fraction = written.lstrip("-").partition(".")
        said = sign + sino(int(whole))
        return said + self.point + "".join(sino(int(d)) for d in fraction) if fraction else said

    def digits(self, written: str) -> str:
        return "".join("공" if d == "0" else sino(int(d)) for d in written)  # 공: zero in phone numbers and codes

    def clock(self, hour_of_day: int, minute: int, second: int | None) -> str:
        """The hour as `hour` says it, minutes and seconds Sino-Korean (삼십 분)."""
        said = hour(hour_of_day) + " 시"
        if minute or second is not None:
            said += " " + sino(minute) + " 분"
        return said + (" " + sino(second) + " 초" if second else "")  # 00:30:00 is 영 시 삼십 분

    def date(self, year: str | None, month: int | None, day: int | None) -> str:
        parts = [sino(int(year)) + " 년"] if year is not None else []
        if month is not None:
            parts.append(_MONTHS.get(month, sino(month) + "월"))
        if day is not None:
            parts.append(sino(day) + " 일")
        return " ".join(parts)

    def fraction(self, numerator: int, denominator: int) -> str:
        return sino(denominator) + "분의 " + sino(numerator)

    def degrees(self, written: str, scale: str) -> str:
        said = ("영하 " if written.startswith("-") else "") + self.number(written.lstrip("-")) + " 도"
        return "화씨 " + said if scale == "F" else said


def _counted(count: str, counter: str) -> str:
    value = int(count)
    if counter == "번째" and value == 1:
        return "첫 번째"
    return native(value) + " " + counter


_SPEAKER = Korean()
_RULES = shared_rules(_SPEAKER, [
    # 오후 3시 30분: the hour as `hour` says it, minutes and seconds Sino-Korean
    rule(rf"(?P<glued>(?<=오전|오후))?{START}(?P<h>\d{{1,2}})\s?시(?!간)(?:\s?(?P<m>\d{{1,2}})\s?분)?(?:\s?(?P<s>\d{{1,2}})\s?초)?",
         lambda m: " " * (m["glued"] is not None) + hour(int(m["h"])) + " 시"
         + (" " + sino(int(m["m"])) + " 분" if m["m"] else "") + (" " + sino(int(m["s"])) + " 초" if m["s"] else "")),
    rule(rf"{START}(?P<y>\d{{1,4}})\s?년\s?(?P<mo>\d{{1,2}})\s?월(?:\s?(?P<d>\d{{1,2}})\s?일)?",
         lambda m: _SPEAKER.date(m["y"], int(m["mo"]), int(m["d"]) if m["d"] else None)),
    rule(rf"{START}(?P<mo>\d{{1,2}})\s?월(?:\s?(?P<d>\d{{1,2}})\s?일)?",
         lambda m: _SPEAKER.date(None, int(m["mo"]), int(m["d"]) if m["d"] else None)
         if 1 <= int(m["mo"]) <= 12 else None),
    rule(rf"{START}(?P<c>\d{{1,15}})\s?(?P<counter>{_NATIVE_COUNTERS})", lambda m: _counted(m["c"], m["counter"])),
], pause=", ")

__all__ = ["normalize"]


def normalize(sentence: str) -> str:
    """One sentence in, its spoken form out: Sino-Korean or native numbers as Korean counts them."""
    return run(_RULES, sentence)
