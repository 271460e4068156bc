"""The soak's verdict: outcomes by kind, latencies, memory and descriptors, KV blocks, and the
checks that make the exit code; written as JSON and a short markdown page."""
from __future__ import annotations

import collections
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .soak_client import BUSY, FRAMING, HANG, KINDS, OK, UNENDED, UNEXPECTED_ERROR, WRONG_ERROR, Result
from .soak_server import EngineLog, Sample


@dataclass(frozen=True)
class Tolerances:
    rss_mb: float = 64.0  # RSS may end this much above its start after warm-up...
    rss_pct: float = 10.0  # ... or this share of it, whichever is larger
    fds: int = 2  # open descriptors at idle may end this many above their start


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


def by_kind(results: list[Result]) -> dict[str, dict[str, Any]]:
    """Per kind: count, statuses, latency p50/p95 of the completed ones, first audio p50."""
    out = {}
    for kind in KINDS:
        rs = [r for r in results if r.kind == kind]
        if not rs:
            continue
        lat = [r.latency_s for r in rs if r.status == OK and r.latency_s is not None]
        first = [r.first_audio_s for r in rs if r.status == OK and r.first_audio_s is not None]
        out[kind] = {"requests": len(rs), "statuses": dict(collections.Counter(r.status for r in rs)),
                     "latency_p50_s": _pct(lat, 50), "latency_p95_s": _pct(lat, 95),
                     "first_audio_p50_s": _pct(first, 50)}
    return out


def series(samples: list[Sample], start: Sample, end: Sample, key: str) -> dict[str, float]:
    after = [getattr(s, key) for s in samples if s.t >= start.t]
    return {"start": getattr(start, key), "peak": max(after), "end": getattr(end, key)}


def checks(results: list[Result], engine: EngineLog, rss: dict[str, float], fds: dict[str, float],
           tol: Tolerances, exit_code: int | None, idle_at_end: bool) -> list[Check]:
    statuses = collections.Counter(r.status for r in results)

    def failed(status: str) -> str:
        bad = [r for r in results if r.status == status]
        kinds = collections.Counter(r.kind for r in bad)
        return f"{len(bad)} ({', '.join(f'{k} {n}' for k, n in kinds.most_common())})" if bad else "0"

    rss_limit = max(tol.rss_mb, rss["start"] * tol.rss_pct / 100)
    last = engine.idle[-1] if engine.idle else None
    unended_engine = sorted(engine.queued - set(engine.ended))
    return [
        Check("no hangs", statuses[HANG] == 0, f"hung responses: {failed(HANG)}"),
        Check("every response ends", statuses[UNENDED] == 0, f"closed before their end: {failed(UNENDED)}"),
        Check("framing", statuses[FRAMING] == 0, f"bad framing: {failed(FRAMING)}"),
        Check("errors as expected", statuses[UNEXPECTED_ERROR] + statuses[WRONG_ERROR] == 0,
              f"unexpected: {failed(UNEXPECTED_ERROR)}; wrong code: {failed(WRONG_ERROR)}; busy: {failed(BUSY)}"),
        Check("engine idle at the end", idle_at_end and not unended_engine,
              f"{len(engine.queued)} engine requests, {len(unended_engine)} never ended"
              + ("" if idle_at_end else "; the engine did not go idle")),
        Check("KV blocks return", last is not None and last[0] == last[1] and not engine.leaks,
              "no idle line in the server log (it needs --debug)" if last is None else
              f"{last[0]}/{last[1]} free at the end; {len(engine.idle)} idle moments, {len(engine.leaks)} with blocks "
              "missing"),
        Check("RSS flat", rss["end"] - rss["start"] <= rss_limit,
              f"{rss['start']:.0f} -> {rss['end']:.0f} MB at idle (peak {rss['peak']:.0f}), "
              f"tolerance {rss_limit:.0f} MB"),
        Check("fds flat", fds["end"] - fds["start"] <= tol.fds,
              f"{fds['start']:.0f} -> {fds['end']:.0f} at idle (peak {fds['peak']:.0f}), tolerance {tol.fds}"),
        Check("no tracebacks", engine.tracebacks == 0, f"{engine.tracebacks} in the server log"),
        Check("clean stop", exit_code == 0, f"exit code {exit_code} after SIGTERM"),
    ]


def build(config: dict[str, Any], results: list[Result], warmup: list[Result], engine: EngineLog,
          samples: list[Sample], idle_samples: list[Sample], tol: Tolerances, exit_code: int | None,
          idle_at_end: bool, duration_s: float) -> dict[str, Any]:
    start, end = idle_samples[0], idle_samples[-1]
    rss, fds = series(samples, start, end, "rss_mb"), series(samples, start, end, "fds")
    results_checks = checks(warmup + results, engine, rss, fds, tol, exit_code, idle_at_end)
    statuses = collections.Counter(r.status for r in results)
    failures = [asdict(r) | {"events": r.events[-12:]} for r in warmup + results if r.status != OK][:30]
    reasons = collections.Counter(engine.ended.values())
    return {
        "config": config, "duration_s": round(duration_s, 1), "requests": len(results), "warmup": len(warmup),
        "passed": all(c.passed for c in results_checks), "checks": [asdict(c) for c in results_checks],
        "statuses": dict(statuses), "warmup_statuses": dict(collections.Counter(r.status for r in warmup)),
        "kinds": by_kind(results),
        "latency_all_ok": {"p50_s": _pct([r.latency_s for r in results if r.status == OK and r.latency_s], 50),
                           "p95_s": _pct([r.latency_s for r in results if r.status == OK and r.latency_s], 95)},
        "rss_mb": rss, "fds": fds, "idle_samples": [asdict(s) for s in idle_samples],
        "kv_blocks": {"free_end": engine.idle[-1][0] if engine.idle else None,
                      "total": engine.idle[-1][1] if engine.idle else None, "idle_moments": len(engine.idle),
                      "idle_moments_with_blocks_missing": len(engine.leaks)},
        "engine": {"requests": len(engine.queued), "ended": len(engine.ended), "reasons": dict(reasons)},
        "server_log": {"tracebacks": engine.tracebacks, "warnings": engine.warnings, "errors": engine.errors[:5]},
        "server_exit_code": exit_code, "failures": failures,
        "samples": [asdict(s) for s in samples[:: max(1, len(samples) // 400)]],
    }


def markdown(label: str, run: dict[str, Any]) -> str:
    c = run["config"]
    lines = [f"## {label}: {'PASS' if run['passed'] else 'FAIL'}", "",
             f"{run['requests']} requests (+{run['warmup']} warm-up) from {c['clients']} clients in "
             f"{run['duration_s']:.0f} s against `{c['model']}` ({c['server_args']}); engine frame cap "
             f"{c['max_frames']}, read bound {c['read_timeout']:.0f} s per event; {c['date']}, {c['machine']}.", "",
             *([c["note"], ""] if c.get("note") else []),
             "| kind | requests | outcomes | latency p50 / p95 (s) | first audio p50 (s) |",
             "| --- | ---: | --- | --- | --- |"]
    for kind, k in run["kinds"].items():
        outcomes = ", ".join(f"{s} {n}" for s, n in sorted(k["statuses"].items()))
        lat = "-" if k["latency_p50_s"] is None else f"{k['latency_p50_s']:.2f} / {k['latency_p95_s']:.2f}"
        first = "-" if k["first_audio_p50_s"] is None else f"{k['first_audio_p50_s']:.2f}"
        lines.append(f"| {kind} | {k['requests']} | {outcomes} | {lat} | {first} |")
    rss, fds, kv = run["rss_mb"], run["fds"], run["kv_blocks"]
    lines += ["", "| after warm-up | start (idle) | peak | end (idle) |", "| --- | ---: | ---: | ---: |",
              f"| RSS (MB) | {rss['start']:.0f} | {rss['peak']:.0f} | {rss['end']:.0f} |",
              f"| open fds | {fds['start']:.0f} | {fds['peak']:.0f} | {fds['end']:.0f} |",
              f"| KV blocks free | | | {kv['free_end']} of {kv['total']} |", "",
              "At idle after warm-up and after each phase: RSS (MB) "
              + ", ".join(f"{s['rss_mb']:.0f}" for s in run["idle_samples"]) + "; of it anonymous "
              + ", ".join(f"{s.get('anon_mb', 0):.0f}" for s in run["idle_samples"]) + "; fds "
              + ", ".join(str(s["fds"]) for s in run["idle_samples"]) + ".", "",
              "| check | result | detail |", "| --- | --- | --- |"]
    lines += [f"| {ch['name']} | {'ok' if ch['passed'] else '**FAIL**'} | {ch['detail']} |" for ch in run["checks"]]
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(run["engine"]["reasons"].items()))
    lines += ["", f"Engine requests: {run['engine']['requests']} (ended: {reasons}); server log: "
              f"{run['server_log']['warnings']} warnings, {run['server_log']['tracebacks']} tracebacks.", ""]
    return "\n".join(lines)


HEADER = """# Soak

`python -m qwen3tts_tools.bench.soak --model DIR`: one server (a child process), a mixed
workload from several asyncio clients — one-shot, streaming (half of them ask `describe`
while audio flows), streams cancelled after their first audio (reset or close, before
their stop), one-shot clients that leave at once or after `audio-start`, two one-shots
pipelined on one connection, `describe`, and errors (unknown voice one-shot and streaming,
text over `max_text_chars`, nothing speakable). Every read is bounded; a response must end
(`audio-stop` for one-shot, errors included; `synthesize-stopped` for streaming) with the
framing Home Assistant reads. After a warm-up the run is split in phases; after each, the
soak waits until the engine is idle and samples the server's RSS and open descriptors
(/proc); the KV pool is read from the scheduler's idle log line (`engine idle: F/T KV
blocks free`, at --debug). Outcomes: ok, hang (a bound ran out), unended (closed before
the end), framing, unexpected_error, wrong_error, busy.

"""


def write(out: Path, label: str, run: dict[str, Any]) -> None:
    """Merge `run` under `label` into OUT.json (other labels kept) and render OUT.md from all."""
    json_path, md_path = out.with_suffix(".json"), out.with_suffix(".md")
    runs = json.loads(json_path.read_text())["runs"] if json_path.exists() else {}
    runs[label] = run
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    md_path.write_text(HEADER + "\n".join(markdown(k, v) for k, v in runs.items()))
