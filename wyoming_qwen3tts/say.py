"""qwen3tts-say: synthesize with a converted model into a WAV file (and/or the codes)."""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

from .engine.devices import KV_PRECISIONS, PRECISIONS
from .engine.model import LoadedModel
from .engine.audio import SAMPLE_RATE, write_wav
from .engine.runner import ChunkSchedule, generate_codes
from .engine.sampling import SamplingParams
from .model.prompt import PromptError, VoiceRequest

log = logging.getLogger("qwen3tts-say")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="qwen3tts-say", description=__doc__)
    parser.add_argument("text", help="what to say")
    parser.add_argument("--model", required=True, type=Path, help="a directory written by qwen3tts-convert")
    parser.add_argument("--voice", help="speaker of a CustomVoice model")
    parser.add_argument("--language", default="auto")
    parser.add_argument("--instruct", help="voice description (VoiceDesign) or style (1.7B CustomVoice)")
    parser.add_argument("--greedy", action="store_true", help="greedy decoding (deterministic)")
    parser.add_argument("--seed", type=int, help="seed for sampling")
    parser.add_argument("--max-frames", type=int, help="stop after this many 80 ms frames")
    parser.add_argument("--precision", choices=PRECISIONS, default="f32")
    parser.add_argument("--kv-precision", choices=KV_PRECISIONS, default="u8")
    parser.add_argument("--device", default="CPU")
    parser.add_argument("-o", "--output", type=Path, help="write 16-bit mono 24 kHz PCM to this WAV file")
    parser.add_argument("--save-codes", type=Path, help="write the [frames, 16] codes (.npy)")
    parser.add_argument("--first-chunk", type=int, default=1, help="frames in the first codec call (latency)")
    parser.add_argument("--steady-chunk", type=int, default=8, help="frames per codec call after the first")
    parser.add_argument("--offline", action="store_true", help="decode all codes at the end in one call")
    parser.add_argument("--debug", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO, format="%(levelname)s %(message)s")
    if args.output is None and args.save_codes is None:
        parser.error("nothing to write: give -o out.wav and/or --save-codes codes.npy")
    start = time.perf_counter()
    chunks = () if args.offline else (args.first_chunk, args.steady_chunk)
    model = LoadedModel(args.model, args.device, args.precision, args.kv_precision, chunks=chunks)
    params = SamplingParams.from_defaults(model.spec.generation, seed=args.seed)
    if args.greedy:
        params = params.greedy()
    try:
        embeds = model.embed_prompt(model.prompt(VoiceRequest(args.text, args.language, args.voice, args.instruct)))
    except PromptError as e:
        log.error("%s", e)
        return 2
    loaded = time.perf_counter()
    schedule = ChunkSchedule(args.first_chunk, args.steady_chunk, args.offline)
    try:
        (seq,) = generate_codes(model, [embeds], [params], max_frames=args.max_frames, schedule=schedule)
    except ValueError as e:
        log.error("%s", e)
        return 2
    elapsed = time.perf_counter() - loaded
    if args.save_codes:
        np.save(args.save_codes, seq.codes)
    if args.output:
        write_wav(args.output, seq.pcm, SAMPLE_RATE)
    log.info("%d frames (%.2f s of audio, stop: %s) in %.2f s (+%.2f s load) -> %s", len(seq.frames),
             seq.pcm.size / SAMPLE_RATE, seq.reason, elapsed, loaded - start,
             ", ".join(str(p) for p in (args.output, args.save_codes) if p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
