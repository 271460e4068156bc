"""qwen3tts-say: synthesize one or more texts into WAV files, with a converted model in this
process (--model) or from a Wyoming server (--uri). Several texts run concurrently, as
satellites would. --show-text prints what a server would say instead (each sentence's spoken
form, docs/TEXT.md), without a model."""
from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from pathlib import Path

import numpy as np

from .backend_flags import add_backend_flags
from .client import ClientError, synthesize
from .clone.cloner import CloneError, Cloner
from .engine.audio import SAMPLE_RATE, write_wav
from .engine.config import EngineConfig
from .engine.devices import KV_PRECISIONS, PRECISION_SETTINGS
from .engine.open import Placement, open_engine
from .engine.sampling import SamplingParams
from .engine.stream import AudioStream, EngineError
from .model.prompt import VoiceRequest
from .normalize import SentenceNormalizer, language_code
from .server.text import normalize, split_sentences

log = logging.getLogger("qwen3tts-say")


def numbered(path: Path, index: int, count: int) -> Path:
    """out.wav for one text; out-1.wav, out-2.wav, ... for several."""
    if count == 1:
        return path
    return path.with_name(f"{path.stem}-{index + 1}{path.suffix}")


def read_texts(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    texts = list(args.text) + list(args.texts or [])
    if args.text_file:
        try:
            lines = args.text_file.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            parser.error(f"cannot read --text-file: {e}")
        texts += [line.strip() for line in lines if line.strip()]
    if not texts:
        parser.error("nothing to say: give TEXT, --text or --text-file")
    return texts


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="qwen3tts-say", description=__doc__)
    parser.add_argument("text", nargs="*", help="what to say")
    parser.add_argument("--text", dest="texts", action="append", help="another text (repeatable)")
    parser.add_argument("--text-file", type=Path, help="one text per line")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--model", type=Path, help="a directory written by qwen3tts-convert")
    where.add_argument("--uri", help="a Wyoming server, e.g. tcp://127.0.0.1:10200")
    parser.add_argument("--stream", action="store_true",
                        help="with --uri: send the text in pieces, as Home Assistant streams an LLM's answer")
    parser.add_argument("--voice", help="speaker of a CustomVoice model")
    parser.add_argument("--language", default="auto")
    parser.add_argument("--instruct", help="voice description (VoiceDesign) or style (1.7B CustomVoice)")
    parser.add_argument("--clone", type=Path, metavar="REF.wav",
                        help="with a Base model: clone the voice of this recording (WAV, 1-30 s)")
    parser.add_argument("--ref-text", help="with --clone: what the recording says (in-context cloning)")
    parser.add_argument("--x-vector-only", action="store_true",
                        help="with --clone: clone from the speaker vector alone (no transcript; less close)")
    parser.add_argument("--greedy", action="store_true", help="greedy decoding (deterministic)")
    parser.add_argument("--seed", type=int, help="seed for sampling (text i gets seed + i)")
    parser.add_argument("--max-frames", type=int, help="stop after this many 80 ms frames")
    parser.add_argument("--precision", choices=PRECISION_SETTINGS, default="auto",
                        help="inference precision (auto: each device's fastest native one; f32: exact)")
    parser.add_argument("--kv-precision", choices=KV_PRECISIONS, default="u8")
    parser.add_argument("--device", default="CPU")
    parser.add_argument("--threads", type=int, help="inference threads per graph (default: all cores)")
    add_backend_flags(parser, default="auto")
    parser.add_argument("-o", "--output", type=Path,
                        help="16-bit mono 24 kHz WAV (several texts: out-1.wav, out-2.wav, ...)")
    parser.add_argument("--save-codes", type=Path, help="the [frames, 16] codes (.npy), numbered like -o")
    parser.add_argument("--first-chunk", type=int, default=1, help="frames in the first codec call (latency)")
    parser.add_argument("--steady-chunk", type=int, default=8, help="frames per codec call after the first")
    parser.add_argument("--offline", action="store_true", help="decode all codes at the end in one call")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("--show-text", action="store_true",
                        help="print the spoken form of each sentence, one a line, as the server reads it out "
                        "(in --language, else each sentence's detected language); loads no model")
    args = parser.parse_args(argv)
    args.all_texts = read_texts(args, parser)
    if args.show_text:
        return args
    if args.model is None and args.uri is None:
        parser.error("one of the arguments --model --uri is required")
    if args.output is None and args.save_codes is None:
        parser.error("nothing to write: give -o out.wav and/or --save-codes codes.npy")
    if args.uri and (args.save_codes or args.offline or args.clone):
        parser.error("--save-codes, --offline and --clone need --model (a server sends audio only, "
                     "and clones the voices of its config.yaml)")
    if args.clone is None and (args.ref_text or args.x_vector_only):
        parser.error("--ref-text and --x-vector-only go with --clone")
    if args.clone is not None:
        if args.voice or args.instruct:
            parser.error("--clone takes no --voice or --instruct")
        if bool(args.ref_text) == args.x_vector_only:
            parser.error("--clone needs --ref-text (the recording's transcript) or --x-vector-only")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.debug else logging.INFO, format="%(levelname)s %(message)s")
    if args.show_text:
        return show_text(args.all_texts, args.language)
    return asyncio.run(remote(args)) if args.uri else local(args)


def show_text(texts: list[str], language: str) -> int:
    """Each sentence of `texts` as the server would have the model read it, one a line."""
    if language != "auto" and language_code(language) is None:
        log.error("--language %s: not one of the languages Qwen3-TTS speaks", language)
        return 2
    spoken = SentenceNormalizer("auto", language_code(language), "qwen3tts-say")
    for text in texts:
        for sentence in split_sentences(text):
            if clean := normalize(sentence, len(sentence)):
                sys.stdout.write(spoken.sentence(clean) + "\n")
    return 0


async def remote(args: argparse.Namespace) -> int:
    """Every text as its own connection to the server, all at once."""
    language = None if args.language == "auto" else args.language
    replies = await asyncio.gather(*(synthesize(args.uri, text, args.voice, language, args.stream)
                                     for text in args.all_texts), return_exceptions=True)
    failed = 0
    for i, reply in enumerate(replies):
        if isinstance(reply, BaseException):
            if not isinstance(reply, (ClientError, OSError, asyncio.TimeoutError)):
                raise reply
            log.error("text %d: %s", i + 1, reply)
            failed += 1
            continue
        pcm = np.frombuffer(bytes(reply.audio), "<i2").astype(np.float32) / 32767.0
        write_wav(numbered(args.output, i, len(replies)), pcm, reply.rate or SAMPLE_RATE)
        rtf = reply.total_s / reply.seconds if reply.seconds else float("nan")
        log.info("text %d: %.2f s of audio, first audio after %s, done in %.2f s (RTF %.2f)", i + 1, reply.seconds,
                 "-" if reply.first_audio_s is None else f"{reply.first_audio_s:.3f} s", reply.total_s, rtf)
    return 1 if failed else 0


def local(args: argparse.Namespace) -> int:
    """Every text through an engine in this process."""
    start = time.perf_counter()
    config = EngineConfig(max_batch=max(1, len(args.all_texts)), max_queue=max(1, len(args.all_texts)),
                          first_chunk=args.first_chunk, steady_chunk=args.steady_chunk, request_timeout=0,
                          backend=args.backend, kernels=args.kernels)
    placement = Placement(args.device, precision=args.precision, kv_precision=args.kv_precision,
                          threads=args.threads)
    try:
        engine = open_engine(args.model, config, placement, offline=args.offline)
    except ValueError as e:  # a KV cache precision the talker's device cannot pair with its precision
        log.error("%s", e)
        return 2
    model = engine.model
    clone = None
    if args.clone is not None:
        try:
            clone = Cloner(model).prompt(args.clone, args.ref_text, args.x_vector_only)
        except CloneError as e:
            log.error("%s", e)
            engine.close()
            return 2
    loaded = time.perf_counter()
    streams: list[AudioStream] = []
    with engine:
        try:
            for i, text in enumerate(args.all_texts):
                params = SamplingParams.from_defaults(model.spec.generation,
                                                      seed=None if args.seed is None else args.seed + i)
                request = (clone.request(text, args.language) if clone else
                           VoiceRequest(text, args.language, args.voice, args.instruct))
                streams.append(engine.submit(request, params.greedy() if args.greedy else params,
                                             max_frames=args.max_frames))
        except ValueError as e:  # bad voice, language, instruct or an oversized prompt
            log.error("%s", e)
            return 2
        pcms: list[np.ndarray | None] = []
        failed = 0
        for stream in streams:
            try:
                pcms.append(stream.read_all())
            except EngineError as e:
                log.error("text %d: %s", stream.id + 1, e)
                pcms.append(None)
                failed += 1
        metrics = engine.metrics()
    elapsed = time.perf_counter() - loaded
    frames = 0
    for i, (stream, pcm) in enumerate(zip(streams, pcms)):
        result = stream.result
        assert result is not None  # read to its end above
        frames += result.frames
        if pcm is None:
            continue
        codes = result.codes
        assert codes is not None  # it was admitted: it has audio
        if args.offline:
            pcm = model.decode_offline(codes, clone.ref_codes if clone else None)
        if args.save_codes:
            np.save(numbered(args.save_codes, i, len(streams)), codes)
        if args.output:
            write_wav(numbered(args.output, i, len(streams)), pcm, SAMPLE_RATE)
        log.info("text %d: %d frames (%.2f s of audio, stop: %s), first audio after %s", i + 1, result.frames,
                 pcm.size / SAMPLE_RATE, result.reason, "-" if result.ttfa_s is None else f"{result.ttfa_s:.3f} s")
    log.info("%d texts, %d frames in %.2f s (+%.2f s load): %.1f frames/s aggregate, median step %.0f ms "
             "(real time = 12.5 frames/s per stream)", len(streams), frames, elapsed, loaded - start,
             frames / elapsed, metrics.step_ms)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
