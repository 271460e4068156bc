"""Mandarin Chinese (simplified script): numbers said as Chinese numerals by cn2an (docs/TEXT-cjk.md)."""

from __future__ import annotations

import cn2an

from .cjk import START, Speaker, rule, run, shared_rules

# Measure words before which 2 is said 两 (两个, 两小时), not 二; ordinals (二号, 二层, 二月) keep 二.
_LIANG = "个|台|只|位|件|种|次|盏|把|张|本|辆|条|小时|天|周|分钟|秒钟|岁|间|瓶|杯|份|块"


class Chinese(Speaker):
    point = "点"
    to = "到"
    sign_for_yen = "CNY"
    plus = "加"
    label = "{}号"
    versus = "对"
    degree_word = "度"
    halves = {"am": "上午", "pm": "下午"}
    slash_dates = False  # 3/4 is a fraction (四分之三); Chinese writes dates 3月4日
    percent_words = "百分之{}"
    units = {
        "km/h": "每小时{}公里", "m/s": "{}米每秒", "kWh": "{}千瓦时", "Wh": "{}瓦时", "MW": "{}兆瓦", "kW": "{}千瓦",
        "W": "{}瓦", "hPa": "{}百帕", "mbar": "{}毫巴", "Pa": "{}帕", "m²": "{}平方米", "m³": "{}立方米",
        "mm": "{}毫米", "cm": "{}厘米", "km": "{}公里", "m": "{}米", "kg": "{}千克", "mg": "{}毫克", "g": "{}克",
        "ml": "{}毫升", "mL": "{}毫升", "L": "{}升", "lx": "{}勒克斯", "V": "{}伏", "mA": "{}毫安", "A": "{}安",
        "Hz": "{}赫兹", "dB": "{}分贝", "ppm": "百万分之{}", "µg/m³": "{}微克每立方米", "μg/m³": "{}微克每立方米",
        "min": "{}分钟", "h": "{}小时", "GB": "{}GB", "MB": "{}MB", "Mbps": "{}兆比特每秒",
    }
    currencies = {"CNY": "{}元", "USD": "{}美元", "EUR": "{}欧元", "GBP": "{}英镑", "JPY": "{}日元", "KRW": "{}韩元"}

    def number(self, written: str) -> str:
        return str(cn2an.an2cn(written, "low"))

    def digits(self, written: str) -> str:
        return str(cn2an.an2cn(written, "direct"))

    def ip_part(self, part: str) -> str:
        return self.digits(part)  # 一九二点一六八点一点一, as IP addresses are read aloud

    def hour(self, hour: int) -> str:
        return "两" if hour == 2 else self.number(str(hour))

    def minutes(self, minute: int, second: int | None) -> str:
        """Minutes under ten keep their zero (零五分); a full hour is the hour alone (十二点)."""
        if minute == 0 and second is None:
            return ""
        said = ("零" if 0 < minute < 10 else "") + self.number(str(minute)) + "分"
        return said + ("" if second is None else self.number(str(second)) + "秒")

    def clock(self, hour: int, minute: int, second: int | None) -> str:
        return self.hour(hour) + "点" + self.minutes(minute, second)

    def half_word(self, hour: int, half: str) -> str:
        if hour == 12:  # 12 PM is noon, 12 AM midnight
            return "中午" if half == "pm" else "凌晨"
        return super().half_word(hour, half)

    def date(self, year: str | None, month: int | None, day: int | None) -> str:
        said = ""
        if year is not None:  # a four-digit year is said digit by digit: 二零二六年
            said += (self.digits(year) if len(year) == 4 else self.number(year)) + "年"
        if month is not None:
            said += self.number(str(month)) + "月"
        if day is not None:
            said += self.number(str(day)) + "日"
        return said

    def fraction(self, numerator: int, denominator: int) -> str:
        return self.number(str(denominator)) + "分之" + self.number(str(numerator))

    def percent(self, written: str) -> str:
        sign = "负" if written.startswith("-") else ""
        return sign + "百分之" + self.number(written.lstrip("-"))

    def degrees(self, written: str, scale: str) -> str:
        said = ("零下" if written.startswith("-") else "") + self.number(written.lstrip("-"))
        return "华氏" + said + "度" if scale == "F" else said + ("摄氏度" if scale == "C" else "度")


_SPEAKER = Chinese()
_RULES = shared_rules(_SPEAKER, [
    # Home Assistant's own clock: 上午9点05分, 下午2点
    rule(rf"{START}(?P<h>\d{{1,2}})点(?P<m>\d{{1,2}})分(?:(?P<s>\d{{1,2}})秒)?",
         lambda m: _SPEAKER.hour(int(m["h"])) + "点"
         + _SPEAKER.minutes(int(m["m"]), int(m["s"]) if m["s"] else None)),
    rule(rf"{START}(?<!第)(?P<h>\d{{1,2}})点(?![0-9])", lambda m: _SPEAKER.hour(int(m["h"])) + "点"),
    rule(rf"{START}(?<!第)2(?=\s?(?:{_LIANG}))", lambda m: "两"),  # 第2个 is 第二个
    rule(rf"{START}(?P<n>\d{{1,15}})年", lambda m: _SPEAKER.date(m["n"], None, None)),
], pause="，")

__all__ = ["normalize"]


def normalize(sentence: str) -> str:
    """One sentence in, its spoken form out: Arabic digits and symbols become Chinese words."""
    return run(_RULES, sentence)
