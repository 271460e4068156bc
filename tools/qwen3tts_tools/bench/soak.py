"""Soak: many mixed requests from several clients against one `wyoming-qwen3tts` process.

    python -m qwen3tts_tools.bench.soak --model DIR [--requests 1000 --clients 8 --label tiny]

Nothing may hang, every response must end with its framing, the KV blocks must all return,
and the server's RSS and open file descriptors must be flat after warm-up (start, peak and
end are reported). Writes docs/bench/soak.json and soak.md (one section per --label) and
exits 1 if a check failed (see soak_report.checks), 2 if the soak could not run.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import soak_report
from .machine import _git_commit, machine
from .soak_client import FAILED, KINDS, Limits, Result, plan, run_clients
from .soak_server import Sample, ServerProcess, free_port, sample_process

log = logging.getLogger("qwen3tts-soak")

DEFAULT_OUT = Path("docs/bench/soak")


@dataclass(frozen=True)
class SoakOptions:
    model: Path
    requests: int = 1000
    clients: int = 8
    warmup: int = 40
    phases: int = 4
    seed: int = 0
    max_frames: int = 24  # engine.max_frames: the longest sentence, in frames of 80 ms
    max_text_chars: int = 1000
    read_timeout: float = 60.0
    response_timeout: float = 600.0
    startup_timeout: float = 900.0
    idle_timeout: float = 120.0
    sample_interval: float = 0.5
    server_args: tuple[str, ...] = ()
    kinds: tuple[str, ...] | None = None  # a subset of soak_client.KINDS (default: all, in their shares)
    tolerances: soak_report.Tolerances = field(default_factory=soak_report.Tolerances)
    work_dir: Path | None = None  # server log, config and data dir (default: a temporary directory)


@dataclass
class SoakRun:
    report: dict[str, Any]
    log_path: Path

    @property
    def passed(self) -> bool:
        return bool(self.report["passed"])


class Sampler:
    """Samples the server's RSS and descriptors every `interval` s, labelled with the phase."""

    def __init__(self, pid: int, interval: float) -> None:
        self.pid, self.interval = pid, interval
        self.phase = "start"
        self.samples: list[Sample] = []
        self._t0 = time.monotonic()

    def now(self) -> Sample:
        sample = sample_process(self.pid, time.monotonic() - self._t0, self.phase)
        self.samples.append(sample)
        return sample

    async def run(self) -> None:
        while True:
            try:
                self.now()
            except (FileNotFoundError, ProcessLookupError):  # the server is gone
                return
            await asyncio.sleep(self.interval)

    async def settled(self, timeout: float = 10.0) -> Sample:
        """A sample once the descriptor count stopped moving (closed connections are reaped)."""
        deadline = time.monotonic() + timeout
        last = self.now()
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            sample = self.now()
            if sample.fds == last.fds:
                return sample
            last = sample
        return last


def write_config(path: Path, options: SoakOptions) -> None:
    path.write_text(f"engine:\n  max_frames: {options.max_frames}\n"
                    f"server:\n  max_text_chars: {options.max_text_chars}\n", encoding="utf-8")


def _progress(total: int) -> Any:
    done: list[Result] = []

    def on_result(result: Result) -> None:
        done.append(result)
        if result.status in FAILED:
            log.warning("request %d (%s): %s %s", result.index, result.kind, result.status, result.detail)
        if len(done) % 100 == 0 or len(done) == total:
            log.info("%d/%d requests done", len(done), total)

    return on_result


async def soak(options: SoakOptions, work: Path) -> SoakRun:
    port = free_port()
    config, log_path = work / "config.yaml", work / "server.log"
    write_config(config, options)
    argv = ServerProcess.command(options.model, port, config, work / "data", list(options.server_args))
    server = ServerProcess(argv, log_path, port)
    limits = Limits(options.read_timeout, options.response_timeout, max_text_chars=options.max_text_chars)
    started = time.monotonic()
    server.start()
    sampler_task = None
    try:
        voices = await server.wait_ready(options.startup_timeout)
        log.info("server ready (pid %d) with %d voices in %.1f s", server.pid, len(voices), time.monotonic() - started)
        sampler = Sampler(server.pid, options.sample_interval)
        sampler_task = asyncio.create_task(sampler.run())
        warm_specs = plan(options.warmup, options.seed + 1, voices, options.max_text_chars, options.kinds)
        specs = plan(options.requests, options.seed, voices, options.max_text_chars, options.kinds)
        sampler.phase = "warm-up"
        warmup = await run_clients("127.0.0.1", port, warm_specs, options.clients, limits, _progress(len(warm_specs)))
        idle = [await _idle(server, sampler, options, "warm-up")]
        results: list[Result] = []
        per_phase = -(-len(specs) // max(1, options.phases))
        for n, begin in enumerate(range(0, len(specs), per_phase)):
            sampler.phase = f"phase {n + 1}"
            results += await run_clients("127.0.0.1", port, specs[begin:begin + per_phase], options.clients, limits,
                                         _progress(min(per_phase, len(specs) - begin)))
            idle.append(await _idle(server, sampler, options, sampler.phase))
        idle_at_end = server.engine_log.idle_now
        sampler_task.cancel()
        duration = time.monotonic() - started
    finally:
        if sampler_task is not None:
            sampler_task.cancel()
        exit_code = await asyncio.to_thread(server.stop)
    server.engine_log.read()
    run_config = {
        "model": str(options.model), "requests": options.requests, "clients": options.clients,
        "warmup": options.warmup, "phases": options.phases, "seed": options.seed, "max_frames": options.max_frames,
        "max_text_chars": options.max_text_chars, "read_timeout": options.read_timeout,
        "server_args": " ".join(options.server_args) or "defaults", "kinds": list(options.kinds or KINDS),
        "tolerances": asdict(options.tolerances),
        "date": datetime.datetime.now().isoformat(timespec="seconds"), "commit": _git_commit(),
        "machine": f"{machine()['cpu']}, {machine()['cores']} cores",
    }
    report = soak_report.build(run_config, results, warmup, server.engine_log, sampler.samples, idle,
                               options.tolerances, exit_code, idle_at_end, duration)
    return SoakRun(report, log_path)


async def _idle(server: ServerProcess, sampler: Sampler, options: SoakOptions, phase: str) -> Sample:
    if not await server.wait_idle(options.idle_timeout):
        log.error("%s: the engine is not idle %.0f s after the last response", phase, options.idle_timeout)
    sample = await sampler.settled()
    log.info("%s done: idle RSS %.0f MB (anonymous %.0f), %d fds, KV blocks %s", phase, sample.rss_mb,
             sample.anon_mb, sample.fds,
             "/".join(map(str, server.engine_log.idle[-1])) if server.engine_log.idle else "?")
    return sample


def run(options: SoakOptions) -> SoakRun:
    """The soak in a work directory (a temporary one is removed if the soak passed)."""
    work = options.work_dir or Path(tempfile.mkdtemp(prefix="qwen3tts-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    result = asyncio.run(soak(options, work))
    if options.work_dir is None and result.passed:
        shutil.rmtree(work, ignore_errors=True)
    return result


def parse_args(argv: list[str] | None) -> tuple[SoakOptions, argparse.Namespace]:
    p = argparse.ArgumentParser(prog="python -m qwen3tts_tools.bench.soak", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    d = SoakOptions(Path("."))
    p.add_argument("--model", type=Path, required=True, help="converted model directory (qwen3tts-convert)")
    p.add_argument("--requests", type=int, default=d.requests)
    p.add_argument("--clients", type=int, default=d.clients)
    p.add_argument("--warmup", type=int, default=d.warmup, help="requests before the start sample")
    p.add_argument("--phases", type=int, default=d.phases, help="idle samples are taken after each phase")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--max-frames", type=int, default=d.max_frames, help="the server's engine.max_frames")
    p.add_argument("--max-text-chars", type=int, default=d.max_text_chars, help="the server's server.max_text_chars")
    p.add_argument("--read-timeout", type=float, default=d.read_timeout, help="longest silence before an event")
    p.add_argument("--response-timeout", type=float, default=d.response_timeout)
    p.add_argument("--startup-timeout", type=float, default=d.startup_timeout)
    p.add_argument("--rss-tolerance-mb", type=float, default=d.tolerances.rss_mb)
    p.add_argument("--rss-tolerance-pct", type=float, default=d.tolerances.rss_pct)
    p.add_argument("--fd-tolerance", type=int, default=d.tolerances.fds)
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="passed to wyoming-qwen3tts (repeat; e.g. --server-arg=--threads --server-arg=2)")
    p.add_argument("--kinds", type=lambda v: tuple(v.split(",")), help="only these request kinds, comma-separated "
                   f"(of {', '.join(KINDS)})")
    p.add_argument("--work-dir", type=Path, help="keep the server log, config and data dir here")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="writes OUT.json and OUT.md (default %(default)s)")
    p.add_argument("--label", default="run", help="section of OUT.json / OUT.md this run replaces")
    p.add_argument("--note", default="", help="a paragraph added to this run's section of OUT.md")
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args(argv)
    if args.kinds and not set(args.kinds) <= set(KINDS):
        p.error(f"--kinds: unknown {', '.join(sorted(set(args.kinds) - set(KINDS)))}")
    options = SoakOptions(
        args.model.resolve(), args.requests, args.clients, args.warmup, args.phases, args.seed, args.max_frames,
        args.max_text_chars, args.read_timeout, args.response_timeout, args.startup_timeout,
        server_args=tuple(args.server_arg), kinds=args.kinds,
        tolerances=soak_report.Tolerances(args.rss_tolerance_mb, args.rss_tolerance_pct, args.fd_tolerance),
        work_dir=args.work_dir)
    return options, args


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options, args = parse_args(argv)
    try:
        result = run(options)
    except (RuntimeError, TimeoutError, OSError) as e:
        log.error("the soak could not run: %s", e)
        return 2
    result.report["config"]["note"] = args.note
    if not args.no_write:
        soak_report.write(args.out, args.label, result.report)
        log.info("wrote %s.json and %s.md", args.out, args.out)
    print(soak_report.markdown(args.label, result.report))
    if not result.passed:
        log.error("soak failed; server log: %s", result.log_path)
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
