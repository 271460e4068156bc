"""python -m wyoming_qwen3tts: the Wyoming server."""
import sys

from .server.app import main

sys.exit(main())
