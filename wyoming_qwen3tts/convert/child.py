"""A conversion run in a child process, for the server's first start.

Converting leaves the process that did it larger than one that only loads the result: the
allocator keeps freed arenas, OpenVINO and nncf keep caches and compiled helper models (a
0.6B INT8 server held 2.65 GB RSS once ready after converting, 2.23 GB started on the files).
A child process returns all of it to the system when it exits (docs/OPENVINO.md §16). It logs
to the same stderr, graph by graph, and a failure comes back as the exception it raised.
"""
from __future__ import annotations

import logging
import multiprocessing
import signal
from multiprocessing.connection import Connection
from pathlib import Path
from types import FrameType
from typing import Any

from ..model.checkpoint import CheckpointError
from .pipeline import ConvertError, convert

log = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # the server's (server/app.py)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # the pipeline removes its partial directory


def _run(conn: Connection, src: str, out: Path, options: dict[str, Any], level: int) -> None:
    logging.basicConfig(level=level, format=LOG_FORMAT)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        convert(src, out, **options)
        conn.send(None)
    except ConvertError as e:
        conn.send(("convert", str(e)))
    except CheckpointError as e:
        conn.send(("checkpoint", str(e)))
    except Exception as e:  # reported to the parent, which raises it there
        log.exception("conversion failed")
        conn.send(("other", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def convert_in_child(src: str | Path, out: Path, **options: Any) -> Path:
    """pipeline.convert(src, out, **options) in a fresh process; returns `out`. Raises what
    convert raised (ConvertError, CheckpointError; anything else as a ConvertError naming it),
    or ConvertError if the child died (killed for memory, say). Interrupted, it stops the child,
    which removes its partial output."""
    context = multiprocessing.get_context("spawn")  # nothing of this process's memory is inherited
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_run, name="qwen3tts-convert", daemon=True,
                            args=(send, str(src), Path(out), options, logging.getLogger().getEffectiveLevel()))
    child.start()
    send.close()
    try:
        try:
            outcome = receive.recv()
        except EOFError:  # it died without a word
            child.join()
            code = child.exitcode
            hint = " (killed: out of memory?)" if code == -signal.SIGKILL else ""
            raise ConvertError(f"the conversion process ended with exit code {code}{hint}") from None
        child.join()
    except BaseException:
        if child.is_alive():
            child.terminate()  # SIGTERM: it cleans up as for Ctrl-C
            child.join()
        raise
    finally:
        receive.close()
    if outcome is None:
        return Path(out)
    kind, message = outcome
    raise CheckpointError(message) if kind == "checkpoint" else ConvertError(message)
