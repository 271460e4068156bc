"""Checkpoint reading, typed model specs, the text tokenizer and prompt layouts."""
