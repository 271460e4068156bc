"""What the text normaliser costs per sentence (issue 39): `python -m qwen3tts_tools.bench.normalize
[--data DIR] [--repeat N]`.

Every sentence of the data files (tests/data/normalize/<language>.yaml: Home Assistant's own
answers, filled, and the tricky cases) is read out N times in its file's language, as a request
whose voice names the language does, and N times with the language detected, as Home Assistant's
requests (which name none) are; the first pass of each is a warm-up (the modules, num2words'
converters and the detector loaded). Prints, per language, the median and 99th percentile of the
microseconds per sentence, both ways. Run it under `flock /tmp/bench.lock` on a shared machine.
"""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np
import yaml

import wyoming_qwen3tts
from wyoming_qwen3tts.normalize import SentenceNormalizer

log = logging.getLogger("qwen3tts-bench-normalize")

DATA = Path(wyoming_qwen3tts.__file__).resolve().parents[1] / "tests" / "data" / "normalize"


def timings(sentences: list[str], spoken: SentenceNormalizer, repeat: int) -> np.ndarray:
    """Microseconds per sentence, `repeat` times each, after one warm-up pass."""
    for sentence in sentences:
        spoken.sentence(sentence)
    out = []
    for _ in range(repeat):
        for sentence in sentences:
            start = time.perf_counter_ns()
            spoken.sentence(sentence)
            out.append((time.perf_counter_ns() - start) / 1000)
    return np.asarray(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qwen3tts_tools.bench.normalize", description=__doc__)
    parser.add_argument("--data", type=Path, default=DATA, help="the data files' directory")
    parser.add_argument("--repeat", type=int, default=50, help="passes over each language's sentences")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    files = sorted(args.data.glob("*.yaml"))
    if not files:
        parser.error(f"no data files in {args.data}")
    print(f"{'language':<9}{'sentences':>10}{'median µs':>11}{'p99 µs':>9}{'detected: median':>18}{'p99 µs':>9}")
    for path in files:
        code = path.stem
        sentences = [row["text"] for row in yaml.safe_load(path.read_text(encoding="utf-8"))]
        given = timings(sentences, SentenceNormalizer("auto", code), args.repeat)
        detected = timings(sentences, SentenceNormalizer("auto", None), args.repeat)
        print(f"{code:<9}{len(sentences):>10}{np.median(given):>11.0f}{np.percentile(given, 99):>9.0f}"
              f"{np.median(detected):>18.0f}{np.percentile(detected, 99):>9.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
