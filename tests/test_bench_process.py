"""The bench's server children (qwen3tts_tools.bench.process.ServerChild) go with the bench:
they run in sessions of their own, so only the bench's own `finally` can stop them, and a
SIGTERM to the bench must unwind it (it once left three servers running)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BENCH = """
import sys, time
from pathlib import Path
from qwen3tts_tools.bench.process import ServerChild
child = ServerChild("sleeper", [sys.executable, "-c", "import time; time.sleep(120)"], 0, Path(sys.argv[1]))
try:
    child.start()
    print(child.pid, flush=True)
    time.sleep(120)
finally:
    child.stop(10)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes (its parent, the bench, has not reaped it yet)
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_sigterm_to_the_bench_stops_its_server_children(tmp_path: Path) -> None:
    bench = subprocess.Popen([sys.executable, "-c", BENCH, str(tmp_path / "child.log")], stdout=subprocess.PIPE,
                             text=True)
    child = 0
    try:
        assert bench.stdout is not None
        child = int(bench.stdout.readline())
        assert _alive(child)
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child), "the server child outlived the bench"
    finally:
        bench.kill()
        bench.wait()
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)
