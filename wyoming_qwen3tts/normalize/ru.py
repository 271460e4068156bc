"""Russian: decimal comma, thousands in groups of three, numbers agreeing with the unit after
them in gender and case by the three plural forms ("двадцать один градус", "два градуса",
"пять градусов", "двадцать одна целая пять десятых градуса"), times "четырнадцать тридцать",
dates "четвёртое декабря две тысячи двадцать шестого года", ordinals "2-й", money, abbreviations
(docs/TEXT.md)."""
from __future__ import annotations

import re
from decimal import Decimal

from .rules import Groups, Language, Rules, Unit, si_units, to_24h, with_unit, words

_MONTHS = ("января", "февраля", "марта", "апреля", "мая", "июня", "июля", "августа", "сентября", "октября",
           "ноября", "декабря")


def _u(one: str, few: str, many: str, gender: str = "m") -> Unit:
    return Unit((one, few, many), gender)


_DEGREE = ("градус", "градуса", "градусов")
_UNITS = {
    **si_units({"W": _u("ватт", "ватта", "ватт"), "Wh": _u("ватт час", "ватт часа", "ватт часов"),
                "m": _u("метр", "метра", "метров"), "g": _u("грамм", "грамма", "граммов"),
                "Hz": _u("герц", "герца", "герц"), "V": _u("вольт", "вольта", "вольт"),
                "A": _u("ампер", "ампера", "ампер"), "Pa": _u("паскаль", "паскаля", "паскалей"),
                "B": _u("байт", "байта", "байт"), "l": _u("литр", "литра", "литров"),
                "L": _u("литр", "литра", "литров"),
                "s": _u("секунда", "секунды", "секунд", "f"), "bar": _u("бар", "бара", "бар")},
               {"k": "кило", "M": "мега", "G": "гига", "T": "тера", "m": "милли", "c": "санти", "µ": "микро",
                "μ": "микро", "h": "гекто"}),
    "Вт": _u("ватт", "ватта", "ватт"), "кВт": _u("киловатт", "киловатта", "киловатт"),
    "Па": _u("паскаль", "паскаля", "паскалей"), "гПа": _u("гектопаскаль", "гектопаскаля", "гектопаскалей"),
    "м": _u("метр", "метра", "метров"), "мм": _u("миллиметр", "миллиметра", "миллиметров"),
    "см": _u("сантиметр", "сантиметра", "сантиметров"), "км": _u("километр", "километра", "километров"),
    "г": _u("грамм", "грамма", "граммов"), "кг": _u("килограмм", "килограмма", "килограммов"),
    "л": _u("литр", "литра", "литров"), "мл": _u("миллилитр", "миллилитра", "миллилитров"),
    "В": _u("вольт", "вольта", "вольт"), "А": _u("ампер", "ампера", "ампер"),
    "°C": Unit(tuple(f + " Цельсия" for f in _DEGREE)), "°F": Unit(tuple(f + " Фаренгейта" for f in _DEGREE)),
    "°": Unit(_DEGREE), "%": _u("процент", "процента", "процентов"),
    "km/h": _u("километр в час", "километра в час", "километров в час"),
    "км/ч": _u("километр в час", "километра в час", "километров в час"),
    "m/s": _u("метр в секунду", "метра в секунду", "метров в секунду"),
    "м/с": _u("метр в секунду", "метра в секунду", "метров в секунду"),
    "m²": _u("квадратный метр", "квадратных метра", "квадратных метров"),
    "м²": _u("квадратный метр", "квадратных метра", "квадратных метров"),
    "m³": _u("кубический метр", "кубических метра", "кубических метров"),
    "µg/m³": _u("микрограмм на кубический метр", "микрограмма на кубический метр", "микрограммов на кубический метр"),
    "μg/m³": _u("микрограмм на кубический метр", "микрограмма на кубический метр", "микрограммов на кубический метр"),
    "кВт·ч": _u("киловатт час", "киловатт часа", "киловатт часов"),
    "мм рт. ст.": _u("миллиметр ртутного столба", "миллиметра ртутного столба", "миллиметров ртутного столба"),
    "dB": _u("децибел", "децибела", "децибел"), "дБ": _u("децибел", "децибела", "децибел"),
    "lx": _u("люкс", "люкса", "люкс"), "лк": _u("люкс", "люкса", "люкс"),
    "min": _u("минута", "минуты", "минут", "f"), "мин": _u("минута", "минуты", "минут", "f"),
    "h": _u("час", "часа", "часов"), "ч": _u("час", "часа", "часов"),
    "ppm": Unit(("миллионная доля", "миллионные доли", "миллионных долей"), "f"),
}


def _plural(value: Decimal) -> int:
    """One, few or many: 1, 21 → 0; 2-4, 22-24 → 1; 5-20, 25 → 2; a fraction → 1 (genitive singular)."""
    if value != value.to_integral_value() or "." in str(value):
        return 1
    n = abs(int(value))
    if n % 10 == 1 and n % 100 != 11:
        return 0
    return 1 if 2 <= n % 10 <= 4 and not 12 <= n % 100 <= 14 else 2


def _agree(spoken: str, gender: str) -> str:
    if gender == "f":
        spoken = re.sub(r"один$", "одна", spoken)
        return re.sub(r"два$", "две", spoken)
    return re.sub(r"один$", "одно", spoken) if gender == "n" else spoken


def _ordinal_form(spoken: str, case: str) -> str:
    """num2words' masculine nominative ordinal ("четвёртый", "третий") in another form:
    "n" neuter nominative, "f" feminine, "gen" masculine genitive, "prep" prepositional."""
    head, _, last = spoken.rpartition(" ")
    soft = last.endswith("ий")  # третий
    stem = last[:-2]
    ending = {"n": "ье" if soft else "ое", "f": "ья" if soft else "ая", "gen": "ьего" if soft else "ого",
              "prep": "ьем" if soft else "ом"}[case]
    return (head + " " if head else "") + stem + ending


def _time(hours: int, minutes: int, seconds: int | None, half: str) -> str:
    spoken = words(to_24h(hours, half), "ru")
    spoken += " ноль ноль" if not minutes else f" ноль {words(minutes, 'ru')}" if minutes < 10 else \
        " " + words(minutes, "ru")
    return spoken


def _date(day: int, month: int, year: int | None, before: str) -> str:
    spoken = f"{_ordinal_form(words(day, 'ru', to='ordinal'), 'n')} {_MONTHS[month - 1]}"
    if year:
        spoken += f" {_ordinal_form(words(year, 'ru', to='ordinal'), 'gen')} года"
    return spoken


def _ordinal(number: int, suffix: str, before: str) -> str:
    spoken = words(number, "ru", to="ordinal")
    case = {"-я": "f", "-ая": "f", "-е": "n", "-ое": "n", "-го": "gen", "-м": "prep"}.get(suffix)
    return _ordinal_form(spoken, case) if case else spoken


_DURATION = {"час": _UNITS["h"], "минут": _UNITS["min"], "секунд": _UNITS["s"]}


def _duration(m: Groups) -> str | None:
    """"2 минут", "5 часа" (Home Assistant's timer answers write "минут" after every number): the
    noun in the form the number takes ("две минуты", "пять часов"), as HA means it."""
    noun = m.group(2)
    unit = _DURATION[re.sub(r"(?<=[тд])[аыу]$|(?<=час)(?:а|ов)$", "", noun)]
    if noun.endswith("у"):  # "через 1 минуту": the accusative, "одну минуту" (2 and more as nominative)
        unit = Unit((noun, *unit.forms[1:]), unit.gender)
        return re.sub(r"одна(?= \w+у$)", "одну", with_unit(Decimal(m.group(1)), unit, LANGUAGE))
    return with_unit(Decimal(m.group(1)), unit, LANGUAGE)


def _year(m: Groups) -> str | None:
    """"2026 год", "2026 года", "в 2026 году", "2026 г.": the year as an ordinal in the noun's case."""
    case = {"год": None, "года": "gen", "г.": "gen", "году": "prep"}[m.group(2)]
    spoken = words(int(m.group(1)), "ru", to="ordinal")
    return f"{_ordinal_form(spoken, case) if case else spoken} {'года' if m.group(2) == 'г.' else m.group(2)}"


LANGUAGE = Language(
    code="ru", groups=" .", decimal=",", point="целых", dot="точка", minus="минус", plus="плюс", to="—",
    and_word="и", version="версия", units=_UNITS, months=_MONTHS, date_order="dmy", time=_time, date=_date,
    ordinal=_ordinal, ordinal_suffix="-(?:ая|ое|го|й|я|е|м)", plural=_plural, agree=_agree,
    abbreviations={"т.е.": "то есть", "т. е.": "то есть", "т.д.": "так далее", "т. д.": "так далее",
                   "т.п.": "тому подобное", "т. п.": "тому подобное", "т.к.": "так как", "т. к.": "так как",
                   "ул.": "улица", "vs.": "против"},
    number_words={"№": "номер", "No.": "номер", "Nr.": "номер", "#": "номер"},
    fractions={2: ("вторая", "вторых"), 3: ("третья", "третьих"), 4: ("четвёртая", "четвёртых")},
    fraction_gender="f",
    feminine=frozenset({"минута", "минуты", "секунда", "секунды", "лампа", "лампы", "дверь", "двери", "комната",
                        "комнаты", "неделя", "недели", "розетка", "розетки"}),
    extra=((r"(?<![\w.])(\d{4})\s(году|года|год|г\.)(?![\w])", _year),
           (r"(?<![\w.,+-])(\d{1,6})\s(часов|часа|час|минуты|минута|минуту|минут|секунды|секунда|секунду|секунд)(?![\w])",
            _duration)),
    phone_groups=True,
)
_RULES = Rules(LANGUAGE)


def normalize(sentence: str) -> str:
    """The spoken form of one Russian sentence."""
    return _RULES.normalize(sentence)
