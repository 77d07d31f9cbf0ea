"""The per-device timeline (Gantt chart) of a simulated plan, as SVG.

One row per device in topology order, then the busiest channels; every interval is a
rectangle coloured by kind (forward, backward, all-reduce, transfer) with its task and micro-batch as
tooltip, and the micro-batch written on the bars wide enough for it.
"""

from __future__ import annotations

from collections import defaultdict

from markupsafe import Markup

from service.dashboard.charts.svg import INK, KIND_COLORS, MUTED, esc, svg, x_axis
from service.dashboard.plan_view import category
from solvers.simulator import TimelineEntry

WIDTH = 1100.0
LABEL_W = 120.0
ROW_H = 18.0
CHANNEL_ROW_H = 12.0
MAX_CHANNELS = 48
LABEL_MIN_W = 16.0  # a bar this wide (px) or wider shows its micro-batch


def gantt(entries: list[TimelineEntry], device_order: list[str], label: str, span_s: float = 0.0) -> Markup:
    """The timeline: devices first (in ``device_order``), then up to ``MAX_CHANNELS`` channels
    by busy time.  Intervals narrower than a tenth of a pixel are merged with their neighbour.
    The axis reaches ``span_s`` seconds where that is longer than the timeline (a measured run's
    bars drawn on the same scale)."""
    rows: dict[str, list[TimelineEntry]] = defaultdict(list)
    for e in entries:
        rows[e.resource].append(e)
    devices = [d for d in device_order if d in rows] + sorted(r for r in rows if "->" not in r and r not in device_order)
    channels = sorted((r for r in rows if "->" in r), key=lambda r: -sum(e.end_s - e.start_s for e in rows[r]))
    hidden = max(0, len(channels) - MAX_CHANNELS)
    channels = channels[:MAX_CHANNELS]
    span = max(max((e.end_s for e in entries), default=0.0), span_s) or 1.0
    plot_w = WIDTH - LABEL_W - 10
    scale = plot_w / span
    top = 24.0
    height = len(devices) * ROW_H + (len(channels) * CHANNEL_ROW_H + 22 if channels else 0)
    body = _legend() + x_axis(LABEL_W, plot_w, top, height, span, "simulated time")
    y = top
    for name in devices:
        body.append(_row(name, rows[name], y, ROW_H, scale, INK))
        y += ROW_H
    if channels:
        y += 8
        body.append(f'<text x="4" y="{y + 8:.1f}" fill="{MUTED}" font-weight="600">channels'
                    f'{esc(f" (busiest {len(channels)}; {hidden} more)" if hidden else "")}</text>')
        y += 14
        for name in channels:
            body.append(_row(name, rows[name], y, CHANNEL_ROW_H, scale, MUTED))
            y += CHANNEL_ROW_H
    return svg(WIDTH, y + 34, body, label)


def _row(name: str, items: list[TimelineEntry], y: float, h: float, scale: float, color: str) -> str:
    out = [f'<g><text x="{LABEL_W - 6:.0f}" y="{y + h * 0.7:.1f}" text-anchor="end" fill="{color}">'
           f'{esc(name)}</text>']
    channel = "->" in name
    where = esc(name)
    top, bar_h = f"{y + 2:.1f}", f"{h - 4:.1f}"
    last_x = -1.0
    for e in sorted(items, key=lambda e: e.start_s):
        x = LABEL_W + e.start_s * scale
        w = max(0.6, (e.end_s - e.start_s) * scale)
        if x + w <= last_x + 0.1:
            continue  # hidden under the previous rectangle at this zoom
        last_x = x + w
        kind = "transfer" if channel else category(e.task)
        mb = micro_batch(e.task)
        what = f"{e.task} (micro-batch {mb}, {kind})" if mb is not None else e.task
        out.append(f'<rect x="{x:.1f}" y="{top}" width="{w:.1f}" height="{bar_h}" fill="{KIND_COLORS[kind]}"><title>'
                   f'{esc(what)} on {where}: {(e.start_s * 1e3):.4g}–{(e.end_s * 1e3):.4g} ms</title></rect>')
        if mb is not None and w >= LABEL_MIN_W and not channel:
            out.append(f'<text x="{x + w / 2:.1f}" y="{y + h * 0.72:.1f}" text-anchor="middle" font-size="9" '
                       f'fill="#fff" pointer-events="none">{mb}</text>')
    out.append("</g>")
    return "".join(out)


def micro_batch(task: str) -> int | None:
    """The micro-batch of a pipeline task (``F3``, ``B3``, ``R3``, ``F3 s0->s1``), else ``None``."""
    head = task.split(" ")[0]
    if len(head) > 1 and head[0] in "FBR" and head[1:].isdigit():
        return int(head[1:])
    return None


def _legend() -> list[str]:
    out = []
    x = LABEL_W
    for kind in ("forward", "backward", "recompute", "allreduce", "transfer"):
        out.append(f'<rect x="{x:.0f}" y="4" width="10" height="10" fill="{KIND_COLORS[kind]}"/>'
                   f'<text x="{x + 14:.0f}" y="13" fill="{MUTED}">{kind}</text>')
        x += 90
    return out
