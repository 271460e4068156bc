"""What the text normaliser costs per sentence (issue 39): `python -m qwen3tts_tools.bench.normalize
[--data DIR] [--repeat N]`.

Every sentence of the data files (tests/data/normalize/<language>.yaml: Home Assistant's own
answers, filled, and the tricky cases) is read out N times in its file's language, as a request
whose voice names the language does, and N times with the language detected, as Home Assistant's
requests (which name none) are; the first pass of each is a warm-up (the modules, num2words'
converters and the detector loaded). Prints, per language, the median and 99th percentile of the
microseconds per sentence, both ways, as wall time and as the thread's CPU time (which a busy
shared host's preemptions do not inflate). Run it under `flock /tmp/bench.lock` on a shared
machine.
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


def timings(sentences: list[str], spoken: SentenceNormalizer, repeat: int) -> tuple[np.ndarray, np.ndarray]:
    """Microseconds per sentence, wall and CPU, `repeat` times each, after one warm-up pass."""
    for sentence in sentences:
        spoken.sentence(sentence)
    wall, cpu = [], []
    for _ in range(repeat):
        for sentence in sentences:
            start, start_cpu = time.perf_counter_ns(), time.thread_time_ns()
            spoken.sentence(sentence)
            cpu.append((time.thread_time_ns() - start_cpu) / 1000)
            wall.append((time.perf_counter_ns() - start) / 1000)
    return np.asarray(wall), np.asarray(cpu)


def _cells(wall: np.ndarray, cpu: np.ndarray) -> str:
    return "".join(f"{v:>8.0f}" for v in (np.median(wall), np.percentile(wall, 99), np.median(cpu),
                                          np.percentile(cpu, 99)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qwen3tts_tools.bench.normalize", description=__doc__)
    parser.add_argument("--data", type=Path, default=DATA, help="the data files' directory")
    parser.add_argument("--repeat", type=int, default=50, help="passes over each language's sentences")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    files = sorted(args.data.glob("*.yaml"))
    if not files:
        parser.error(f"no data files in {args.data}")
    print("µs per sentence: language given | detected; each wall median, p99, then CPU median, p99")
    print(f"{'language':<9}{'sentences':>10}" + "".join(f"{h:>8}" for h in ("median", "p99", "cpu", "cpu p99") * 2))
    for path in files:
        code = path.stem
        sentences = [row["text"] for row in yaml.safe_load(path.read_text(encoding="utf-8"))]
        given = timings(sentences, SentenceNormalizer("auto", code), args.repeat)
        detected = timings(sentences, SentenceNormalizer("auto", None), args.repeat)
        print(f"{code:<9}{len(sentences):>10}{_cells(*given)}{_cells(*detected)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
