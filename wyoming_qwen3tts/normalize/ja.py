"""Japanese: numbers said as kanji numerals by num2words, units in katakana (docs/TEXT-cjk.md)."""

from __future__ import annotations

from num2words import num2words

from .cjk import START, Speaker, rule, run, shared_rules


def kanji(value: int) -> str:
    return str(num2words(value, lang="ja"))


class Japanese(Speaker):
    point = "点"
    to = "から"
    sign_for_yen = "JPY"
    plus = "プラス"
    label = "{}番"
    versus = "対"
    degree_word = "度"
    halves = {"am": "午前", "pm": "午後"}
    twelve_is_zero = True  # 12:30 PM is 午後零時三十分, 12:10 AM 午前零時十分: 午後十二時 is read as midnight by many
    noon = "正午"
    slash_dates = True  # 12/4(木) is the 4th of December in Japanese text
    percent_words = "{}パーセント"
    units = {
        "km/h": "時速{}キロ", "m/s": "秒速{}メートル", "kWh": "{}キロワット時", "Wh": "{}ワット時",
        "MW": "{}メガワット", "kW": "{}キロワット", "W": "{}ワット", "hPa": "{}ヘクトパスカル",
        "mbar": "{}ミリバール", "Pa": "{}パスカル",
        "m²": "{}平方メートル", "m³": "{}立方メートル", "mm": "{}ミリ", "cm": "{}センチ", "km": "{}キロメートル",
        "m": "{}メートル", "kg": "{}キロ", "mg": "{}ミリグラム", "g": "{}グラム", "ml": "{}ミリリットル",
        "mL": "{}ミリリットル", "L": "{}リットル", "lx": "{}ルクス", "V": "{}ボルト", "mA": "{}ミリアンペア",
        "A": "{}アンペア", "Hz": "{}ヘルツ", "dB": "{}デシベル", "ppm": "{}ピーピーエム",
        "µg/m³": "{}マイクログラム毎立方メートル", "μg/m³": "{}マイクログラム毎立方メートル", "min": "{}分",
        "h": "{}時間", "GB": "{}ギガバイト", "MB": "{}メガバイト", "Mbps": "{}メガビーピーエス",
    }
    currencies = {"JPY": "{}円", "USD": "{}ドル", "EUR": "{}ユーロ", "GBP": "{}ポンド", "CNY": "{}元",
                  "KRW": "{}ウォン"}
    cents = {"JPY": "{}銭", "USD": "{}セント", "EUR": "{}セント", "GBP": "{}ペンス"}

    def number(self, written: str) -> str:
        """num2words says the integer part; decimals are said digit by digit as written (1.000: 一点零零零)."""
        sign = "マイナス" if written.startswith("-") else ""
        whole, _, fraction = written.lstrip("-").partition(".")
        if whole == "0" and not fraction:
            return sign + "ゼロ"  # a zero amount is ゼロ (ゼロ円); 零 stays in 零時 and 零点五
        said = sign + kanji(int(whole))
        return said + "点" + "".join(kanji(int(d)) for d in fraction) if fraction else said

    def digits(self, written: str) -> str:
        return "".join("ゼロ" if d == "0" else kanji(int(d)) for d in written)  # ゼロ九ゼロ, as phone numbers

    def clock(self, hour: int, minute: int, second: int | None) -> str:
        said = kanji(hour) + "時"
        if minute or second is not None:
            said += kanji(minute) + "分"
        return said + ("" if second is None else kanji(second) + "秒")

    def date(self, year: str | None, month: int | None, day: int | None) -> str:
        return ((kanji(int(year)) + "年" if year is not None else "")
                + (kanji(month) + "月" if month is not None else "")
                + (kanji(day) + "日" if day is not None else ""))

    def fraction(self, numerator: int, denominator: int) -> str:
        return kanji(denominator) + "分の" + kanji(numerator)

    def degrees(self, written: str, scale: str) -> str:
        return ("華氏" if scale == "F" else "") + self.number(written) + "度"


_RULES = shared_rules(Japanese(), [
    rule(rf"{START}0(?=時)", lambda m: "零"),  # 零時, midnight (ゼロ is for amounts)
], pause="、")

__all__ = ["normalize"]


def normalize(sentence: str) -> str:
    """One sentence in, its spoken form out: Arabic digits and symbols become kanji numerals and words."""
    return run(_RULES, sentence)
