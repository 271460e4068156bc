"""Wyoming text-to-speech server for Qwen3-TTS on OpenVINO."""

__version__ = "0.1.0"
