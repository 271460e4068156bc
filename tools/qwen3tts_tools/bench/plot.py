"""The benchmark's PNG: throughput against concurrency, time to first audio, and where one
stream's frame time goes — ours next to the peers that ran."""
from __future__ import annotations

from pathlib import Path

from .official import OfficialResult
from .report import Report, peer_title, peers
from .scenarios import FRAME_S

COLOURS = {"official": "tab:red", "vox": "tab:purple"}
SPLIT = (("talker", "talker"), ("subcode", "subcode"), ("codec", "decoder"), ("host", None))  # ours → peers' key


def plot(r: Report, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    ran = peers(r)
    labels = {name: peer_title(peer) for name, peer in ran.items()}
    levels = r.ours.levels
    streams = [level.streams for level in levels]
    fps = [level.aggregate_fps for level in levels]
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 4.4))

    spread = [[f.median - f.min for f in fps], [f.max - f.median for f in fps]]
    left.errorbar(streams, [f.median for f in fps], yerr=spread, marker="o", capsize=3, label="ours")
    left.plot(streams, [n / FRAME_S for n in streams], "k--", lw=1, label="real time for every stream")
    left.plot(streams, [n * 1e3 / r.bound.bound_ms["total"] for n in streams], ":", color="tab:green", lw=2,
              label="bandwidth bound (weights read once per step)")
    for name, peer in ran.items():
        left.plot([1], [peer.e2e_fps.median], "s", color=COLOURS[name], label=labels[name])
    left.set(xlabel="concurrent streams", ylabel="frames/s (all streams)", xscale="log", yscale="log",
             title=f"Throughput, {r.preset}")
    left.xaxis.set_minor_locator(NullLocator())
    left.set_xticks(streams, [str(n) for n in streams])
    left.legend(fontsize=8)

    middle.boxplot([[t * 1e3 for t in level.ttfa_s] for level in levels], tick_labels=[str(n) for n in streams])
    for name, peer in ran.items():
        official = isinstance(peer, OfficialResult)
        first = peer.ttff_s if isinstance(peer, OfficialResult) else peer.ttfa_s
        middle.axhline(first.median * 1e3, color=COLOURS[name], ls="--", lw=1,
                       label=f"{labels[name]}: " + ("first frame (no audio yet)" if official else "first audio"))
    middle.set(xlabel="concurrent streams", ylabel="ms", title="Time to first audio (every request)")
    if ran:
        middle.legend(fontsize=8)

    names = ["ours", *labels.values()]
    bottoms = [0.0] * len(names)
    for ours_key, peer_key in SPLIT:
        heights = [r.one.per_frame_ms[ours_key].median,
                   *(p.per_frame_ms[peer_key].median if peer_key else 0.0 for p in ran.values())]
        right.bar(names, heights, bottom=bottoms, label=ours_key)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    right.set(ylabel="ms per frame", title="One stream: time per frame by graph", ylim=(0, max(bottoms) * 1.25))
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
