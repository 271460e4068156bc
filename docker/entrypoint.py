#!/opt/venv/bin/python3
"""The standalone container's entrypoint (docs/CONTAINER.md): the server's command line from
the /data volume and the environment, so `docker run IMAGE [server flags...]` needs no flags.

  serve [FLAGS...]  exec the server: Wyoming on 0.0.0.0:10200, conversions in /data, the
                    settings of /data/config.yaml when it exists, the HTTP side on
                    $QWEN3TTS_HTTP (default 0.0.0.0:8000, "off" for none) with the bearer token
                    $QWEN3TTS_HTTP_TOKEN, which is required: that port is reachable from outside
                    the container. The server reads the token from its environment itself, so it
                    never shows in the host's process list. FLAGS go last, so they override all
                    of this.
  health            exit 0 when the server answers a Wyoming `describe` (the HEALTHCHECK). It
                    does from seconds after the start, also while the first start downloads and
                    converts the model; /api/health would say 503 for all that time.

Any other first argument that starts with "-" is taken as `serve`'s flags.
"""
from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger("qwen3tts-container")

DATA_DIR = Path("/data")
CONFIG_FILE = DATA_DIR / "config.yaml"
WYOMING_PORT = 10200
HTTP_DEFAULT = "0.0.0.0:8000"
HTTP_ENV = "QWEN3TTS_HTTP"
TOKEN_ENV = "QWEN3TTS_HTTP_TOKEN"
HTTP_OFF = ("off", "")
INFO_FLAGS = ("-h", "--help", "--version")


class SetupError(Exception):
    """The container's settings cannot start a server; the message says what to set."""


def server_command(env: Mapping[str, str], flags: Sequence[str], config_file: Path = CONFIG_FILE) -> list[str]:
    """The server's argv for this environment; the user's flags last (argparse: the last wins)."""
    argv = [sys.executable, "-m", "wyoming_qwen3tts", "--uri", f"tcp://0.0.0.0:{WYOMING_PORT}",
            "--data-dir", str(DATA_DIR)]
    if config_file.is_file():
        argv += ["--config", str(config_file)]
    http = env.get(HTTP_ENV, HTTP_DEFAULT).strip()
    if http.lower() not in HTTP_OFF:
        if not env.get(TOKEN_ENV, "").strip():
            raise SetupError(f"{TOKEN_ENV} is not set: the HTTP side ({http}) is reachable from outside the "
                             f"container, so it needs a bearer token (or set {HTTP_ENV}=off for Wyoming only)")
        argv += ["--http", http]  # the token stays in the environment the server inherits
    return argv + list(flags)


def serve(flags: Sequence[str], env: Mapping[str, str] = os.environ,
          exec_: Callable[[str, list[str]], Any] = os.execv) -> None:
    """Replace this process with the server, so it is PID 1 and `docker stop`'s SIGTERM reaches it.
    `--help` and `--version` go to the server alone (they need no token)."""
    asks = [flag for flag in flags if flag in INFO_FLAGS]
    argv = [sys.executable, "-m", "wyoming_qwen3tts", *asks] if asks else server_command(env, flags)
    shown = ["***" if i > 0 and argv[i - 1] == "--http-token" else arg for i, arg in enumerate(argv)]
    log.info("starting: %s", " ".join(shown))  # a user's own --http-token flag is still hidden
    exec_(argv[0], argv)


def health() -> bool:
    """True when the server answers `describe` on the Wyoming port."""
    from wyoming_qwen3tts.client import describe

    return asyncio.run(describe(WYOMING_PORT, timeout=10.0)) is not None


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    args = list(sys.argv[1:] if argv is None else argv)
    command = args.pop(0) if args and not args[0].startswith("-") else "serve"
    if command == "health":
        return 0 if health() else 1
    if command != "serve":
        log.error("unknown command %r: serve [server flags...] or health", command)
        return 2
    try:
        serve(args)
    except SetupError as e:
        log.error("%s", e)
        return 2
    return 0  # only reached when exec_ does not replace the process (tests)


if __name__ == "__main__":
    sys.exit(main())
