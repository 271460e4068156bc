"""The benchmark's outputs: every figure as JSON, a markdown summary, and a PNG plot."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .limits import Bandwidth, Bound, GraphReads
from .official import OfficialResult
from .scenarios import FRAME_S, PARTS, LevelResult, OursResult, Workload


@dataclass
class Report:
    preset: str
    created: str  # UTC, ISO 8601
    command: str
    wall_s: float  # the whole benchmark, preparation included
    other_cpu_share: float  # of all cores' time, taken by other processes while measuring
    steal_share: float  # ... and by other virtual machines on the host (steal time)
    machine: dict[str, Any]
    versions: dict[str, str | None]
    model: dict[str, Any]  # checkpoint and converted directories, the conversion's manifest facts
    workload: Workload
    bandwidth: Bandwidth
    reads: dict[str, GraphReads]  # talker, subcode, codec (steady chunk)
    mb_per_frame: dict[str, dict[str, float]]  # graph → weight precision → MB read per frame
    bound: Bound
    ours: OursResult
    official: OfficialResult
    ratios: dict[str, float]  # ours ÷ official (> 1: ours is better)

    @property
    def one(self) -> LevelResult:
        return self.ours.one


def compare(ours: OursResult, official: OfficialResult) -> dict[str, float]:
    """Side by side, one stream each; every ratio > 1 means ours is faster or earlier."""
    one = ours.one
    return {
        "frames_per_s": one.aggregate_fps.median / official.e2e_fps.median,  # both with decoding
        "frames_per_s_vs_official_generation_only": one.aggregate_fps.median / official.generate_fps.median,
        "first_audio_vs_official_first_frame": official.ttff_s.median / one.ttfa_p50_s.median,
        "best_throughput": max(level.aggregate_fps.median for level in ours.levels) / official.e2e_fps.median,
        "peak_rss": official.peak_rss_mb / ours.peak_rss_mb,
    }


def write_json(report: Report, path: Path) -> None:
    data = dataclasses.asdict(report)
    data["bound"]["one_stream_ms_per_frame"] = report.one.per_frame_ms["total"].median
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _one_stream(r: Report) -> list[str]:
    one, off = r.one, r.official
    ms = one.per_frame_ms
    lines = ["## One stream", "",
             _row("", "ours", f"official ({off.dtype})", "ours vs official"), _row("---", "---:", "---:", "---:"),
             _row("first audio (ours) / first frame (official), ms", one.ttfa_p50_s.scaled(1e3).text(".0f"),
                  off.ttff_s.scaled(1e3).text(".0f"), f"{r.ratios['first_audio_vs_official_first_frame']:.2f}× sooner"),
             _row("frames/s, with decoding", one.aggregate_fps.text(".2f"), off.e2e_fps.text(".2f"),
                  f"{r.ratios['frames_per_s']:.2f}×"),
             _row("frames/s, generation only", "–", off.generate_fps.text(".2f"),
                  f"{r.ratios['frames_per_s_vs_official_generation_only']:.2f}×"),
             _row("RTF (time ÷ audio; < 1 is faster than real time)", one.rtf.text(".2f"), off.rtf.text(".2f"), ""),
             _row("talker ms/frame (prefill included)", ms["talker"].text(), off.per_frame_ms["talker"].text(), ""),
             _row("subcode ms/frame (15 code-predictor steps)", ms["subcode"].text(),
                  off.per_frame_ms["subcode"].text(),
                  ""),
             _row("codec decoder ms/frame", ms["codec"].text(), off.per_frame_ms["decoder"].text(), ""),
             _row("host ms/frame (sampling, bookkeeping)", ms["host"].text(), "–", ""),
             _row("peak RSS, MB", f"{r.ours.peak_rss_mb:.0f}", f"{off.peak_rss_mb:.0f} (loads in float32)",
                  f"{r.ratios['peak_rss']:.2f}× less"),
             "",
             "Official dtype probe (generation frames/s over a short run): "
             + ", ".join(f"{k} {v:.2f}" for k, v in off.probe_fps.items())
             + f"; measured in {off.dtype}. The official package does not stream: its first audio is the whole "
               f"utterance (median {off.rtf.median * r.workload.audio_s:.1f} s here).", ""]
    return lines


def _levels(r: Report) -> list[str]:
    lines = ["## Concurrent streams", "",
             _row("streams", "frames/s (all streams)", "per-stream RTF", "first audio p50, ms", "first audio p90, ms",
                  "ms per frame", "× bound", "KV blocks used"),
             _row(*["---:"] * 8)]
    for level in r.ours.levels:
        per_frame = level.per_frame_ms["total"]
        lines.append(_row(level.streams, level.aggregate_fps.text(".2f"), level.rtf.text(".2f"),
                          level.ttfa_p50_s.scaled(1e3).text(".0f"), level.ttfa_p90_s.scaled(1e3).text(".0f"),
                          per_frame.text(), f"{per_frame.median / (r.bound.bound_ms['total'] / level.streams):.1f}",
                          f"{level.blocks_used} of {r.ours.blocks_total}"))
    lines += ["", f"Real time is {1 / FRAME_S:.1f} frames/s per stream. × bound: ms per frame ÷ (one stream's "
                  f"bandwidth bound ÷ streams), since a step reads the weights once for the whole batch.", ""]
    return lines


def _limit(r: Report) -> list[str]:
    bw, b = r.bandwidth, r.bound
    lines = ["## The limit: memory bandwidth", "",
             "Read bandwidth (" + ", ".join(f"{n} thread{'s' * (n > 1)} {s.text()} GB/s" for n, s in
                                          bw.gb_per_s.items())
             + f"; {bw.buffer_mb} MB buffer). The bound uses {b.gb_per_s:.1f} GB/s.", "",
             _row("graph", "MB/frame int8", "fp16", "fp32", "as converted", "bound ms", "measured ms", "× bound"),
             _row("---", *["---:"] * 7)]
    for name in (*r.reads, "total"):
        per = r.mb_per_frame.get(name, {})
        cells = [f"{per[p]:.4g}" if p in per else "–" for p in ("int8", "fp16", "fp32")]
        lines.append(_row(name, *cells, f"{b.mb_per_frame[name]:.4g}", f"{b.bound_ms[name]:.3g}",
                          f"{b.measured_ms[name]:.1f}", f"{b.ratio[name]:.1f}"))
    lines += ["", "Talker: its weights once per step plus the u8 KV cache of the mean context; subcode: the 5 "
                  "code-predictor layers 15 times and one lm_head per code; codec: the steady chunk graph's "
                  f"weights once per {r.ours.setup.steady_chunk} frames. Measured: one stream, host time aside.", ""]
    return lines


def _costs(r: Report) -> list[str]:
    ms = r.one.per_frame_ms
    total = ms["total"].median
    ranked = sorted(PARTS, key=lambda p: -ms[p].median)[:3]
    lines = ["## Biggest costs per frame (one stream)", ""]
    for i, part in enumerate(ranked, 1):
        ratio = f", {r.bound.ratio[part]:.1f}× its bandwidth bound" if part in r.bound.ratio else ""
        lines.append(f"{i}. {part}: {ms[part].median:.1f} ms ({ms[part].median / total:.0%}){ratio}")
    return lines + [""]


def markdown(r: Report) -> str:
    m, w, o = r.machine, r.workload, r.ours
    flags = ", ".join(f for f, present in m["cpu_flags"].items() if present)
    header = [f"# qwen3tts-bench: {r.preset} ({r.created})", "",
              f"- Machine: {m['cpu']}, {m['cores']} cores ({flags}), {m['memory_gb']:.0f} GiB; {m['os']}",
              "- Versions: " + ", ".join(f"{k} {v}" for k, v in r.versions.items() if v),
              f"- Workload: \"{w.text}\" ({o.prompt_tokens} prompt tokens), speaker {w.speaker}, {w.language}; "
              f"{w.frames} frames ({w.audio_s:.1f} s of audio) per request, EOS held off; default sampling; "
              f"{w.runs} runs per scenario, figures are median (min–max)",
              f"- Ours: {o.setup.runner} runner, INT8 weights, {o.setup.precision} compute, "
              f"{o.setup.kv_precision} KV cache, codec chunks "
              f"{o.setup.first_chunk} then {o.setup.steady_chunk}, threads {o.setup.threads or m['cores']}; "
              f"load {o.load_s:.1f} s; official: qwen-tts on PyTorch, {r.official.threads} threads",
              f"- Command: `{r.command}` ({r.wall_s / 60:.1f} min); while it measured, other processes used "
              f"{r.other_cpu_share:.1%} of the CPU and other virtual machines took {r.steal_share:.1%} (steal)", ""]
    return "\n".join(header + _one_stream(r) + _levels(r) + _limit(r) + _costs(r))


def plot(r: Report, path: Path) -> None:
    """Aggregate frames/s against concurrency, and the distribution of time to first audio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    levels = r.ours.levels
    streams = [level.streams for level in levels]
    fps = [level.aggregate_fps for level in levels]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    spread = [[f.median - f.min for f in fps], [f.max - f.median for f in fps]]
    left.errorbar(streams, [f.median for f in fps], yerr=spread,
                  marker="o", capsize=3, label="ours")
    left.plot(streams, [n / FRAME_S for n in streams], "k--", lw=1, label="real time for every stream")
    left.plot(streams, [n * 1e3 / r.bound.bound_ms["total"] for n in streams], ":", color="tab:green", lw=2,
              label="bandwidth bound (weights read once per step)")
    left.plot([1], [r.official.e2e_fps.median], "s", color="tab:red", label=f"official ({r.official.dtype})")
    left.set(xlabel="concurrent streams", ylabel="frames/s (all streams)", xscale="log", yscale="log",
             title=f"Throughput, {r.preset}")
    left.xaxis.set_minor_locator(NullLocator())
    left.set_xticks(streams, [str(n) for n in streams])
    left.legend(fontsize=8)
    right.boxplot([[t * 1e3 for t in level.ttfa_s] for level in levels], tick_labels=[str(n) for n in streams])
    right.axhline(r.official.ttff_s.median * 1e3, color="tab:red", ls="--", lw=1,
                  label="official: first frame (no audio yet)")
    right.set(xlabel="concurrent streams", ylabel="ms", title="Time to first audio (every request)")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
