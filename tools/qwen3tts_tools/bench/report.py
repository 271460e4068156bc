"""The benchmark's outputs: every figure as JSON (with a flat summary), and a markdown report."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .limits import LM_PRECISIONS, Bandwidth, Bound, GraphReads
from .official import OfficialResult
from .scenarios import FRAME_S, PARTS, LevelResult, OursResult, Workload
from .vox_peer import QUANT, VoxResult


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
    official: OfficialResult | None  # None: not asked for (--peers)
    vox: VoxResult | None
    ratios: dict[str, dict[str, float]]  # peer → ours ÷ theirs (> 1: ours is better), one stream each
    summary: dict[str, float | None]  # the headline figures, flat (see summary())
    # --as-cpu: the smaller CPU stood in for (as_cpu.AsCpu's fields) and "larger_kernels", per
    # OpenVINO graph the nodes that still ran AVX-512/AMX kernels; None: this CPU as it is
    as_cpu: dict[str, Any] | None = None

    @property
    def one(self) -> LevelResult:
        return self.ours.one


def compare_official(ours: OursResult, official: OfficialResult) -> dict[str, float]:
    """Every ratio > 1 means ours is faster, earlier or smaller. The official package does
    not stream: our first audio is compared with its first frame (codes, no audio yet)."""
    one = ours.one
    return {
        "frames_per_s": one.aggregate_fps.median / official.e2e_fps.median,  # both with decoding
        "frames_per_s_generation_only": one.aggregate_fps.median / official.generate_fps.median,
        "first_audio": official.ttff_s.median / one.ttfa_p50_s.median,
        "best_throughput": max(level.aggregate_fps.median for level in ours.levels) / official.e2e_fps.median,
        "peak_rss": official.peak_rss_mb / one.peak_rss_mb,
    }


def compare_vox(ours: OursResult, vox: VoxResult) -> dict[str, float]:
    """As compare_official; vox streams, so first audio is compared with first audio."""
    one = ours.one
    return {
        "frames_per_s": one.aggregate_fps.median / vox.e2e_fps.median,
        "first_audio": vox.ttfa_s.median / one.ttfa_p50_s.median,
        "best_throughput": max(level.aggregate_fps.median for level in ours.levels) / vox.e2e_fps.median,
        "peak_rss": vox.peak_rss_mb / one.peak_rss_mb,
    }


def summary(ours: OursResult, official: OfficialResult | None, vox: VoxResult | None) -> dict[str, float | None]:
    """The headline figures; null where a level or a peer did not run. x_PEER: our one-stream
    frames/s ÷ theirs (both with decoding)."""
    one, four = ours.one, ours.level(4)
    fps = one.aggregate_fps.median
    return {"frames_per_s_1": fps, "first_audio_ms_1": one.ttfa_p50_s.median * 1e3, "peak_rss_mb_1": one.peak_rss_mb,
            "frames_per_s_4": four.aggregate_fps.median if four else None,
            "peak_rss_mb_4": four.peak_rss_mb if four else None,
            "x_official": fps / official.e2e_fps.median if official else None,
            "x_vox": fps / vox.e2e_fps.median if vox else None}


def write_json(report: Report, path: Path) -> None:
    data = dataclasses.asdict(report)
    data["bound"]["one_stream_ms_per_frame"] = report.one.per_frame_ms["total"].median
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


ROWS = (("first", "first audio, ms"),
        ("fps", "frames/s, with decoding"),
        ("generation", "frames/s, generation only"),
        ("rtf", "RTF (time ÷ audio; < 1 is faster than real time)"),
        ("talker", "talker ms/frame (prefill included)"),
        ("subcode", "subcode ms/frame (15 code-predictor steps)"),
        ("codec", "codec decoder ms/frame"),
        ("host", "host ms/frame (sampling, bookkeeping)"),
        ("rss", "peak RSS, MB (its process)"))


def _ours_cells(one: LevelResult) -> dict[str, str]:
    ms = one.per_frame_ms
    return {"first": one.ttfa_p50_s.scaled(1e3).text(".0f"), "fps": one.aggregate_fps.text(".2f"),
            "rtf": one.rtf.text(".2f"), "talker": ms["talker"].text(), "subcode": ms["subcode"].text(),
            "codec": ms["codec"].text(), "host": ms["host"].text(), "rss": f"{one.peak_rss_mb:.0f}"}


def _peer_cells(peer: OfficialResult | VoxResult) -> dict[str, str]:
    ms = peer.per_frame_ms
    first = peer.ttff_s if isinstance(peer, OfficialResult) else peer.ttfa_s
    cells = {"first": first.scaled(1e3).text(".0f"), "fps": peer.e2e_fps.text(".2f"), "rtf": peer.rtf.text(".2f"),
             "talker": ms["talker"].text(), "subcode": ms["subcode"].text(), "codec": ms["decoder"].text(),
             "rss": f"{peer.peak_rss_mb:.0f}"}
    if isinstance(peer, OfficialResult):
        cells["first"] += " (first frame, codes only)"
        cells["generation"] = peer.generate_fps.text(".2f")
        cells["rss"] += " (loads in float32)"
    return cells


def _better(ratio: float, better: str, worse: str) -> str:
    """'2.50× sooner' for a ratio ≥ 1, '1.25× later' (its inverse) below."""
    return f"{ratio:.2f}× {better}" if ratio >= 1 else f"{1 / ratio:.2f}× {worse}"


def _ratio_cells(ratios: dict[str, float]) -> dict[str, str]:
    cells = {"first": _better(ratios["first_audio"], "sooner", "later"), "fps": f"**{ratios['frames_per_s']:.2f}×**",
             "rss": _better(ratios["peak_rss"], "less", "more")}
    if "frames_per_s_generation_only" in ratios:
        cells["generation"] = f"{ratios['frames_per_s_generation_only']:.2f}×"
    return cells


def peers(r: Report) -> dict[str, OfficialResult | VoxResult]:
    """The peers that ran, by name."""
    return {name: peer for name, peer in (("official", r.official), ("vox", r.vox)) if peer is not None}


def peer_title(peer: OfficialResult | VoxResult) -> str:
    return f"official ({peer.dtype})" if isinstance(peer, OfficialResult) else f"vox {peer.version} ({QUANT})"


def _one_stream(r: Report) -> list[str]:
    ran = peers(r)
    columns = [_ours_cells(r.one), *(_peer_cells(p) for p in ran.values()),
               *(_ratio_cells(r.ratios[name]) for name in ran)]
    lines = ["## One stream", "",
             _row("", "ours", *(peer_title(p) for p in ran.values()), *(f"ours vs {n}" for n in ran)),
             _row("---", *["---:"] * (len(columns)))]
    blank = ["–"] * (1 + len(ran)) + [""] * len(ran)  # a figure a side does not have; no ratio
    lines += [_row(label, *(c.get(key, b) for c, b in zip(columns, blank)))
              for key, label in ROWS if any(key in c for c in columns)]
    lines.append("")
    if r.official:
        off = r.official
        lines += ["Official: qwen-tts on PyTorch. Dtype probe (generation frames/s over a short run): "
                  + ", ".join(f"{k} {v:.2f}" for k, v in off.probe_fps.items())
                  + f"; measured in {off.dtype}. It does not stream: its first audio is the whole utterance "
                    f"(median {off.rtf.median * r.workload.audio_s:.1f} s here).", ""]
    if r.vox:
        vox = r.vox
        overlap = " (decoding overlapped with generation)" if vox.overlapped_codec else ""
        lines += [f"vox: vox-tts {vox.version} (C++), its {QUANT} build of the same checkpoint "
                  f"({', '.join(f'{k} {v}' for k, v in vox.precision.items())}), {vox.threads} threads, "
                  f"{vox.plan['mode']} mode; EOS held off (VOX_DEBUG_NO_EOS); it streams {vox.chunk_frames}-frame "
                  f"chunks (its default), first audio is its first chunk; the split is its own stage timers"
                  f"{overlap}; load {vox.load_s:.1f} s.", ""]
    return lines


def _levels(r: Report) -> list[str]:
    lines = ["## Concurrent streams", "",
             _row("streams", "frames/s (all streams)", "per-stream RTF", "first audio p50, ms", "first audio p90, ms",
                  "ms per frame", "× bound", "KV blocks used", "peak RSS, MB"),
             _row(*["---:"] * 9)]
    for level in r.ours.levels:
        per_frame = level.per_frame_ms["total"]
        lines.append(_row(level.streams, level.aggregate_fps.text(".2f"), level.rtf.text(".2f"),
                          level.ttfa_p50_s.scaled(1e3).text(".0f"), level.ttfa_p90_s.scaled(1e3).text(".0f"),
                          per_frame.text(), f"{per_frame.median / (r.bound.bound_ms['total'] / level.streams):.1f}",
                          f"{level.blocks_used} of {r.ours.blocks_total}", f"{level.peak_rss_mb:.0f}"))
    lines += ["", f"Real time is {1 / FRAME_S:.1f} frames/s per stream. × bound: ms per frame ÷ (one stream's "
                  f"bandwidth bound ÷ streams), since a step reads the weights once for the whole batch. "
                  f"1 and 4 streams run each in a process of its own, so their peak RSS is theirs; other levels "
                  f"share one process (the peak so far, levels in rising order).", ""]
    return lines


def _limit(r: Report) -> list[str]:
    bw, b = r.bandwidth, r.bound
    lines = ["## The limit: memory bandwidth", "",
             "Read bandwidth (" + ", ".join(f"{n} thread{'s' * (n > 1)} {s.text()} GB/s" for n, s in
                                          bw.gb_per_s.items())
             + f"; {bw.buffer_mb} MB buffer). The bound uses {b.gb_per_s:.1f} GB/s.", "",
             _row("graph", *(f"MB/frame {p}" for p in LM_PRECISIONS), "as converted", "bound ms", "measured ms",
                  "× bound"),
             _row("---", *["---:"] * (len(LM_PRECISIONS) + 4))]
    for name in (*r.reads, "total"):
        per = r.mb_per_frame.get(name, {})
        cells = [f"{per[p]:.4g}" if p in per else "–" for p in LM_PRECISIONS]
        lines.append(_row(name, *cells, f"{b.mb_per_frame[name]:.4g}", f"{b.bound_ms[name]:.3g}",
                          f"{b.measured_ms[name]:.1f}", f"{b.ratio[name]:.1f}"))
    lines += ["", "Talker: its weights once per step plus the u8 KV cache of the mean context; subcode: the 5 "
                  "code-predictor layers 15 times and one lm_head per code; codec: the steady chunk graph's "
                  f"weights once per {r.ours.setup.steady_chunk} frames. Measured: one stream, host time aside.", ""]
    return lines


MEMORY_STAGES = {
    "before": "before the runner: Python, OpenVINO, tokenizer, prompt-embedding graph, codec lead graph",
    "codec": "codec decoder chunk graph(s)",
    "talker": "talker (its KV pool is allocated, not yet touched)",
    "subcode": "subcode graph",
    "warm-up": "a first request: KV blocks written, activations, kernel caches",
}


def _memory(r: Report) -> list[str]:
    """Resident memory by component: each stage's growth over the one before it."""
    marks = r.ours.memory
    if not marks:
        return []
    lines = ["## Memory by component (one-stream process)", "",
             _row("component", "anonymous MB", "file-backed MB", "total MB"), _row("---", "---:", "---:", "---:")]
    previous = (0.0, 0.0)
    for stage, anon, file in marks:
        lines.append(_row(MEMORY_STAGES.get(stage, stage), f"{anon - previous[0]:+.0f}", f"{file - previous[1]:+.0f}",
                          f"{anon + file - sum(previous):+.0f}"))
        previous = (anon, file)
    four = r.ours.level(4)
    lines += [_row("**resident after the warm-up**", f"{previous[0]:.0f}", f"{previous[1]:.0f}",
                   f"**{sum(previous):.0f}**"), "",
              f"Peak RSS: {r.one.peak_rss_mb:.0f} MB at one stream"
              + (f", {four.peak_rss_mb:.0f} MB at four" if four else "")
              + ". Anonymous memory is what the plugins allocated (packed weights, KV blocks, buffers); file-backed "
                "is mapped weights still in memory (the native runner drops each graph's once it is compiled and has "
                "run; gathered tables and small constants fault back in when read).", ""]
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


LM_GRAPHS = ("talker", "subcode")


def _compute(o: OursResult) -> str:
    """The precision asked for, and what each graph ran with."""
    return f"{o.setup.precision} (" + ", ".join(f"{g} {p}" for g, p in o.precisions.items()) + ")"


def _peer_line(peer: OfficialResult | VoxResult) -> str:
    if isinstance(peer, OfficialResult):
        return f"official: qwen-tts on PyTorch, {peer.threads} threads"
    return f"vox: vox-tts {peer.version} ({QUANT} .tmod), {peer.threads} threads"


def _as_cpu_lines(as_cpu: dict[str, Any] | None) -> list[str]:
    """The smaller CPU stood in for, and what of OpenVINO's graphs the cap did not reach."""
    if as_cpu is None:
        return []
    larger = "; ".join(f"{graph}: " + ", ".join(f"{n}× {kernel}" for kernel, n in kernels.items())
                       for graph, kernels in as_cpu["larger_kernels"].items() if kernels)
    return [f"- **As CPU `{as_cpu['name']}`** ({as_cpu['cpus']}): the runner's {as_cpu['kernels']} kernels, "
            f"OpenVINO with ONEDNN_MAX_CPU_ISA={as_cpu['onednn_isa']} (no BF16: auto runs f32), the official "
            f"peer with ATEN_CPU_CAPABILITY={as_cpu['torch_isa']} and the same oneDNN cap, vox not capped; "
            f"OpenVINO nodes the cap does not reach (AVX-512/AMX kernels chosen from the CPU's own flags): "
            f"{larger or 'none'}"]


def markdown(r: Report) -> str:
    m, w, o = r.machine, r.workload, r.ours
    flags = ", ".join(f for f, present in m["cpu_flags"].items() if present)
    header = [f"# qwen3tts-bench: {r.preset} ({r.created})", "",
              f"- Machine: {m['cpu']}, {m['cores']} cores ({flags}), {m['memory_gb']:.0f} GiB; {m['os']}",
              "- Versions: " + ", ".join(f"{k} {v}" for k, v in r.versions.items() if v),
              f"- Workload: \"{w.text}\" ({o.prompt_tokens} prompt tokens), speaker {w.speaker}, {w.language}; "
              f"{w.frames} frames ({w.audio_s:.1f} s of audio) per request, EOS held off; default sampling; "
              f"{w.runs} runs per scenario, figures are median (min–max)",
              f"- Ours: {o.setup.backend} backend, {r.model['options']['weights'].upper()} weights "
              f"({', '.join(f'{g} {f}' for g, f in r.model['graphs'].items() if g in LM_GRAPHS)}), "
              f"codec {r.model['options']['codec_weights']}, {_compute(o)} compute, "
              f"{o.setup.kv_precision} KV cache, codec chunks "
              f"{o.setup.first_chunk} then {o.setup.steady_chunk}, codec lead {'on' if o.setup.codec_lead else 'off'}, "
              f"threads {o.setup.threads or m['cores']}, "
              f"talker {o.talker_runtime}, code predictor {o.subcode_runtime}, "
              f"load {o.load_s:.1f} s",
              *_as_cpu_lines(r.as_cpu),
              "- Peers: " + ("; ".join(_peer_line(peer) for peer in peers(r).values()) or "none (--peers none)"),
              f"- Command: `{r.command}` ({r.wall_s / 60:.1f} min); while it measured, other processes used "
              f"{r.other_cpu_share:.1%} of the CPU and other virtual machines took {r.steal_share:.1%} (steal)", ""]
    return "\n".join(header + _one_stream(r) + _levels(r) + _memory(r) + _limit(r) + _costs(r))
