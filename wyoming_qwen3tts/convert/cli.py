"""qwen3tts-convert: a Qwen3-TTS checkpoint (directory or hub repo id) -> OpenVINO IR directory."""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from ..model.checkpoint import CheckpointError
from .ops import WEIGHT_FORMATS
from .pipeline import CODEC_FORMATS, FIRST_CHUNKS, STEADY_CHUNKS, WEIGHT_BUDGET, ConvertError, convert

log = logging.getLogger("qwen3tts-convert")


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated frame counts, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"chunk sizes must be positive frame counts, got {text!r}")
    return sizes


def _interrupt(signum: int, frame: FrameType | None) -> None:
    # SIGTERM (docker stop, systemd) cleans up like Ctrl-C: the partial directory is removed
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="qwen3tts-convert", description=__doc__)
    parser.add_argument("src", help="checkpoint directory, or hub repo id such as Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice")
    parser.add_argument("out", type=Path, help="output directory (created atomically)")
    parser.add_argument("--weights", choices=WEIGHT_FORMATS, default="int8",
                        help="int8: INT8_SYM weights via nncf (default); int4: INT4_SYM (group 128) talker and "
                             "subcode, the fast preset (judge it on real weights); mixed: INT8 talker, INT4 "
                             "subcode (code predictor); fp16 / fp32: uncompressed")
    parser.add_argument("--codec-weights", choices=CODEC_FORMATS, default="fp32",
                        help="codec decoder weights (fp32 is exact; fp16 halves its size; int8: its last "
                             "blocks' convolutions in INT8, about twice as fast on a CPU without BF16, "
                             "not exact — docs/BENCHMARKS.md \"The decoder in INT8\")")
    parser.add_argument("--first-chunks", type=_sizes, default=FIRST_CHUNKS,
                        help="comma-separated frame counts of the first codec call to export (default 1,2,4; "
                             "with a first chunk of 1, a streamed response also takes 1-frame chunks while "
                             "only just ahead of playback)")
    parser.add_argument("--steady-chunks", type=_sizes, default=STEADY_CHUNKS,
                        help="comma-separated frame counts of later codec calls to export (default 8,24)")
    parser.add_argument("--weight-budget-mb", type=int, default=WEIGHT_BUDGET // 2**20,
                        help="MB of a graph's f32 weights held in RAM while it is converted; the rest go to a "
                             "scratch file beside the output (default %(default)s: a 1.7B converts in 1.6 GB)")
    parser.add_argument("--revision", help="hub branch, tag or commit (only with a repo id)")
    parser.add_argument("--force", action="store_true", help="replace an existing converted OUT")
    parser.add_argument("--debug", action="store_true", help="debug logging and tracebacks")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if in_main else None
    try:
        convert(args.src, args.out, weights=args.weights, force=args.force, revision=args.revision,
                codec_weights=args.codec_weights, first_chunks=args.first_chunks, steady_chunks=args.steady_chunks,
                weight_budget=max(0, args.weight_budget_mb) * 2**20)
    except (ConvertError, CheckpointError) as e:
        log.error("%s", e, exc_info=args.debug)
        return 1
    except KeyboardInterrupt:
        log.error("interrupted: the partial conversion was removed, %s is untouched", args.out)
        return 130
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
