"""The command-line flags for engine.backend and engine.kernels, shared by every command that
loads an engine (the server, qwen3tts-say, the benchmark), and the retired flags they replaced,
each an error that names its replacement."""
from __future__ import annotations

import argparse
from typing import Any

from .engine.config import BACKENDS, KERNELS, RETIRED, retired


class _Retired(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        parser.error(retired(self.dest, flag=True))


def add_backend_flags(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    """--backend and --kernels (default: `default` for both, None = keep config.yaml's), and
    the retired --runner, --int4-kernel, --talker-runtime and --subcode-runtime."""
    parser.add_argument("--backend", choices=BACKENDS, default=default,
                        help="who runs the talker and the code predictor: auto (the runner's own layer stacks on "
                             "a CPU unless the precision is f32, OpenVINO's graphs elsewhere), native, openvino, or "
                             "python (the reference step loop, for debugging)")
    parser.add_argument("--kernels", choices=KERNELS, default=default,
                        help="instruction set of the runner's own kernels (auto: the fastest this CPU runs; a "
                             "smaller one measures a smaller CPU's copy)")
    for name in RETIRED:
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, nargs="?", action=_Retired,
                            help=argparse.SUPPRESS)
