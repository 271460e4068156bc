"""The layer stacks' weight products alone: every talker and code-predictor layer's four
products, as the native runner packs, quantizes and shares them over its thread team, with
nothing between them (no attention, norms, sampling or decoding), in the runner's order: a
talker pass, then the frame's code-predictor passes, so the caches are as a step leaves them.
Set beside the bench's stage times, it splits a step into what the products cost and what the
rest does, per batch size (docs/BENCHMARKS.md, "Why the fast preset's four streams stop near
2.1× on this host").

    python -m qwen3tts_tools.bench.products --converted DIR [--rows 1,4] [--threads 2]
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from wyoming_qwen3tts.engine.config import KERNELS
from wyoming_qwen3tts.model.manifest import read_converted

from .process import run_isolated, setup_logging

log = logging.getLogger("qwen3tts-bench")

GRAPHS = ("talker", "subcode")
WARM_UP = 2  # frames not counted: the first ones fault the packed weights in and warm the caches


@dataclass
class ProductTimes:
    """One graph's products at one batch size: ms per pass over all its layers."""

    graph: str
    rows: int
    median_ms: float
    min_ms: float
    frames: int  # timed frames


@dataclass
class ProductsReport:
    kernels: str
    threads: int
    subcode_steps: int  # code-predictor passes per frame
    times: list[ProductTimes]

    def step_ms(self, rows: int) -> float:
        """A decode step's products at `rows` streams: one talker pass, subcode_steps code-predictor passes."""
        by_graph = {t.graph: t.median_ms for t in self.times if t.rows == rows}
        return by_graph["talker"] + self.subcode_steps * by_graph["subcode"]


def measure(model_dir: Path, rows: list[int], kernels: str, threads: int, frames: int) -> ProductsReport:
    """Run in a process of its own, so that no other work shares its cores and caches."""
    from wyoming_qwen3tts._native import testing

    _, spec = read_converted(model_dir, graphs=GRAPHS)
    steps = spec.code_predictor.num_code_groups - 1
    stacks = testing.ProductStacks(str(model_dir / "talker.xml"), str(model_dir / "subcode.xml"), kernels, threads)
    by_rows = {}
    for n in rows:
        talker, subcode = stacks.time(n, steps, frames + WARM_UP)
        by_rows[n] = (talker[WARM_UP:], [ms / steps for ms in subcode[WARM_UP:]])
        log.info("%d rows: talker %.3f ms, code predictor %.3f ms a pass", n, statistics.median(by_rows[n][0]),
                 statistics.median(by_rows[n][1]))
    times = [ProductTimes(graph, n, statistics.median(ms[i]), min(ms[i]), frames)
             for i, graph in enumerate(GRAPHS) for n, ms in by_rows.items()]
    return ProductsReport(kernels or "auto", threads, steps, times)


def markdown(report: ProductsReport) -> str:
    lines = [f"Products alone ({report.kernels} kernels, {report.threads} threads), ms per pass over the layers "
             f"(median, min of the frames); a step's products = talker + {report.subcode_steps} × subcode", "",
             "| graph | rows | median ms | min ms |", "| --- | ---: | ---: | ---: |"]
    lines += [f"| {t.graph} | {t.rows} | {t.median_ms:.3f} | {t.min_ms:.3f} |" for t in report.times]
    lines += ["", "| rows | a step's products, ms | per row, ms |", "| ---: | ---: | ---: |"]
    for n in sorted({t.rows for t in report.times}):
        lines.append(f"| {n} | {report.step_ms(n):.2f} | {report.step_ms(n) / n:.2f} |")
    return "\n".join(lines)


def rows_list(text: str) -> list[int]:
    try:
        rows = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"rows: comma-separated integers, not {text!r}") from None
    if not rows or min(rows) < 1:
        raise argparse.ArgumentTypeError("rows must be positive")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m qwen3tts_tools.bench.products", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--converted", type=Path, required=True, help="a converted model directory (INT8 or INT4)")
    parser.add_argument("--rows", type=rows_list, default=[1, 4], help="batch sizes, e.g. 1,4 (streams)")
    parser.add_argument("--threads", type=int, default=2, help="the thread team's size (the runner's threads)")
    parser.add_argument("--kernels", choices=KERNELS, default="auto",
                        help="the kernel copy (auto: the fastest this CPU runs)")
    parser.add_argument("--frames", type=int, default=20, help="timed frames per batch size")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.frames < 1:
        parser.error("--threads and --frames must be positive")
    setup_logging(logging.INFO)
    kernels = "" if args.kernels == "auto" else args.kernels
    report = run_isolated(measure, args.converted, args.rows, kernels, args.threads, args.frames)
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=1), encoding="utf-8")
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
