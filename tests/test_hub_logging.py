"""huggingface_hub's records reach the console once: through the application's handler, not
also through the stderr handler the library attaches to its own logger at import (offline, a
first start's every retry warning was printed twice)."""
from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import logging, sys
logging.basicConfig(stream=sys.stderr, format="ours %(message)s")
from wyoming_qwen3tts.hub import import_hub
hub = import_hub()
hub.hf_hub_download  # the lazy parts load
logging.getLogger("huggingface_hub.utils._http").warning("Retrying in 1s [Retry 1/5].")
"""


def test_a_hub_warning_is_printed_once():
    err = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True).stderr
    lines = [line for line in err.splitlines() if "Retrying in 1s" in line]
    assert lines == ["ours Retrying in 1s [Retry 1/5]."], err
