"""qwen3tts-bench: how fast the engine is, next to the official implementation and the
machine's memory-bandwidth bound (`python -m qwen3tts_tools.bench`)."""
