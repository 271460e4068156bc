"""Synthetic Qwen3-TTS checkpoints in the exact Hugging Face layout, with random weights."""
