"""Developer tools for wyoming-qwen3tts, kept out of the runtime package (and so out of the
add-on image): the benchmarks (`bench`) and the synthetic checkpoint writer (`synthetic`)."""
