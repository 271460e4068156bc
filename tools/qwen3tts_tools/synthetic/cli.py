"""qwen3tts-synthetic: write a random-weight Qwen3-TTS checkpoint in the exact HF layout."""
from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from .presets import PRESETS, VARIANTS
from .writer import write_checkpoint

log = logging.getLogger("qwen3tts-synthetic")


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="qwen3tts-synthetic", description=__doc__)
    parser.add_argument("out", type=Path, help="output directory")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny",
                        help="tiny / tiny-1.7b for tests; 0.6b / 1.7b have the real shapes")
    parser.add_argument("--variant", choices=VARIANTS, default="custom_voice")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16",
                        help="main weight dtype (the releases use bfloat16)")
    parser.add_argument("--shards", type=int, default=1, help="split model.safetensors into N shards")
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO, format="%(levelname)s %(message)s")
    start = time.perf_counter()
    out = write_checkpoint(args.out, args.preset, args.variant, args.seed, args.dtype, args.shards)
    log.info("wrote %s (%s %s) in %.1f s, %.1f MB", out, args.preset, args.variant,
             time.perf_counter() - start, _size(out) / 1e6)


if __name__ == "__main__":
    main()
