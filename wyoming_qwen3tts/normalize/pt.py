"""Portuguese (European spelling, as num2words' "pt"): decimal comma ("vírgula") and thousands
dots, times "catorze e trinta" (hours are feminine: "duas e cinco"), dates "quatro de dezembro"
("primeiro" for the 1st), units agreeing in gender, money, ordinals "1º"/"1ª", abbreviations
(docs/TEXT.md)."""
from __future__ import annotations

from .rules import NINE_DIGIT_PHONE, Language, Rules, Unit, si_units, to_24h, words

_MONTHS = ("janeiro", "fevereiro", "março", "abril", "maio", "junho", "julho", "agosto", "setembro", "outubro",
           "novembro", "dezembro")


def _u(one: str, other: str | None = None, gender: str = "m") -> Unit:
    return Unit((one, other or one + "s"), gender)


_UNITS = {
    **si_units({"W": _u("watt"), "Wh": _u("watt hora", "watts hora"), "m": _u("metro"), "g": _u("grama"),
                "Hz": _u("hertz", "hertz"), "V": _u("volt"), "A": _u("ampere"), "Pa": _u("pascal", "pascais"),
                "B": _u("byte"), "l": _u("litro"), "L": _u("litro"), "s": _u("segundo"), "bar": _u("bar", "bares")},
               {"k": "quilo", "M": "mega", "G": "giga", "T": "tera", "m": "mili", "c": "centi", "µ": "micro",
                "μ": "micro", "h": "hecto"}),
    "mm": _u("milímetro"), "cm": _u("centímetro"), "km": _u("quilómetro"),  # the accent moves
    "°C": _u("grau Celsius", "graus Celsius"), "°F": _u("grau Fahrenheit", "graus Fahrenheit"),
    "°": _u("grau", "graus"), "%": _u("por cento", "por cento"),
    "km/h": _u("quilómetro por hora", "quilómetros por hora"), "m/s": _u("metro por segundo", "metros por segundo"),
    "m²": _u("metro quadrado", "metros quadrados"), "m³": _u("metro cúbico", "metros cúbicos"),
    "µg/m³": _u("micrograma por metro cúbico", "microgramas por metro cúbico"),
    "μg/m³": _u("micrograma por metro cúbico", "microgramas por metro cúbico"),
    "ppm": _u("parte por milhão", "partes por milhão", "f"), "dB": _u("decibel", "decibéis"),
    "lx": _u("lux", "lux"), "lm": _u("lúmen", "lúmenes"), "min": _u("minuto"), "h": _u("hora", gender="f"),
    "mm/h": _u("milímetro por hora", "milímetros por hora"), "Mbit/s": _u("megabit por segundo",
    "megabits por segundo"),
}


def _agree(spoken: str, gender: str) -> str:
    """"uma hora", "duas horas", "duzentas horas"."""
    if gender != "f":
        return spoken
    spoken = spoken.replace("entos", "entas")
    if spoken.endswith("um"):
        return spoken + "a"
    return spoken[:-4] + "duas" if spoken.endswith("dois") else spoken


def _time(hours: int, minutes: int, seconds: int | None, half: str) -> str:
    hours = to_24h(hours, half)
    spoken = _agree(words(hours, "pt"), "f")
    spoken += f" e {words(minutes, 'pt')}" if minutes else f" hora{'s' if hours != 1 else ''}"
    if seconds:
        spoken += f" e {words(seconds, 'pt')} segundo{'s' if seconds != 1 else ''}"
    return spoken


def _date(day: int, month: int, year: int | None, before: str) -> str:
    spoken = f"{'primeiro' if day == 1 else words(day, 'pt')} de {_MONTHS[month - 1]}"
    return f"{spoken} de {words(year, 'pt')}" if year else spoken


def _ordinal(number: int, suffix: str, before: str) -> str:
    spoken = words(number, "pt", to="ordinal")
    if suffix.endswith("ª"):
        return " ".join(w[:-1] + "a" if w.endswith("o") else w for w in spoken.split())
    return spoken


LANGUAGE = Language(
    phones=(NINE_DIGIT_PHONE,),
    code="pt", groups=" .", decimal=",", point="vírgula", dot="ponto", minus="menos", plus="mais", to="a",
    and_word="e", version="versão", units=_UNITS, months=_MONTHS, date_order="dmy", time=_time, date=_date,
    ordinal=_ordinal, ordinal_suffix=r"\.?[ºª]",
    plural=lambda value: 0 if value == 1 and "." not in str(value) else 1, agree=_agree,
    abbreviations={"p. ex.": "por exemplo", "aprox.": "aproximadamente", "etc.": "etcetera", "Sr.": "senhor",
                   "Sra.": "senhora", "Dr.": "doutor", "vs.": "contra"},
    number_words={"nº": "número", "n.º": "número", "Nº": "número", "N.º": "número", "No.": "número",
                  "Nr.": "número", "#": "número"},
    fractions={2: ("meio", "meios"), 3: ("terço", "terços"), 4: ("quarto", "quartos")},
    date_words=("em", "no", "dia", "até"),
    feminine=frozenset({"hora", "horas", "luz", "luzes", "lâmpada", "lâmpadas", "porta", "portas", "janela",
                        "janelas", "pessoa", "pessoas", "vez", "vezes", "divisão", "divisões", "semana",
                        "semanas"}),
    between=("entre",),
    counted_before=frozenset({"e", "ou", "de", "do", "da", "menos", "a", "em", "por", "para", "com", "que", "mais"}),
    feminine_after=frozenset({"é", "são", "às", "as"}),
    of_millions=lambda noun: "de " + noun,
    decimals_as_number=True,
)
_RULES = Rules(LANGUAGE)


def normalize(sentence: str) -> str:
    """The spoken form of one Portuguese sentence."""
    return _RULES.normalize(sentence)
