"""Generate several utterances together through a batch over the Python runner, with no
scheduler: the tests' way to run exact batches (every prompt must fit the pool at once)."""
from __future__ import annotations

from wyoming_qwen3tts.engine.batch import Batch
from wyoming_qwen3tts.engine.loaded_model import LoadedModel
from wyoming_qwen3tts.engine.runner import PythonRunner
from wyoming_qwen3tts.engine.sampling import SamplingParams
from wyoming_qwen3tts.engine.sequence import Sequence
from wyoming_qwen3tts.engine.step import ChunkSchedule
from wyoming_qwen3tts.model.embed import PromptEmbeds


def generate_codes(model: LoadedModel, prompts: list[PromptEmbeds], params: list[SamplingParams],
                   num_blocks: int = 256, max_frames: int | None = None,
                   schedule: ChunkSchedule | None = None, prefill_chunk: int = 256) -> list[Sequence]:
    """Generate several utterances together, all in the same paged calls (no scheduler:
    every prompt must fit the pool at once). Audio streams into each sequence's `audio`
    by the chunk schedule, or is decoded at the end with the offline graph."""
    schedule = schedule or ChunkSchedule()
    batch = Batch(model, PythonRunner(model, schedule), num_blocks, schedule, prefill_chunk)
    seqs = [batch.add(e, p, max_frames) for e, p in zip(prompts, params)]
    steps = max((s.max_frames + -(-s.embeds.prefill.shape[0] // prefill_chunk) for s in seqs), default=0)
    for _ in range(steps + 1):
        if not batch.active:
            break
        batch.step()
    if schedule.offline:
        for seq in seqs:
            seq.audio = [model.decode_offline(seq.codes, seq.embeds.codec_prefix)]
    return seqs
