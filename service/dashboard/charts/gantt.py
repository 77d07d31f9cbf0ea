"""The per-device timeline (Gantt chart) of a simulated plan, as SVG.

One row per device in topology order, then the busiest channels; every interval is a
rectangle coloured by kind (forward, full backward, input-gradient backward ``I``, weight-gradient
``W`` hatched, recompute, all-reduce, transfer) with its task, virtual stage, chunk and micro-batch
as tooltip.  Bars wide enough carry their micro-batch, or ``s<stage>:<micro-batch>`` when a rank
runs several virtual stages (interleaved and V-shaped schedules).
"""

from __future__ import annotations

from collections import defaultdict

from markupsafe import Markup

from service.dashboard.charts.svg import INK, KIND_COLORS, MUTED, esc, svg, x_axis
from solvers.simulator import TimelineEntry
from solvers.simulator.trace import KIND_WORDS, category

WIDTH = 1100.0
LABEL_W = 120.0
ROW_H = 18.0
CHANNEL_ROW_H = 12.0
MAX_CHANNELS = 48
LABEL_MIN_W = 16.0  # a bar this wide (px) or wider shows its micro-batch
LABEL_CHAR_W = 5.5  # px per character of a bar's label (font size 9), plus 4 px of margin
WEIGHT_PATTERN = "w-hatch"  # the SVG pattern of weight-gradient (W) bars
LEGEND = (("forward", "forward (F)"), ("backward", "backward (B)"), ("backward-input", "input grad (I)"),
          ("backward-weight", "weight grad (W)"), ("recompute", "recompute"), ("allreduce", "all-reduce"),
          ("transfer", "transfer"))
ALWAYS_IN_LEGEND = frozenset({"forward", "backward", "allreduce", "transfer"})


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
    virtual = any((e.chunk or 0) > 0 for e in entries)  # a rank runs several virtual stages
    kinds = {category(e) for e in entries}
    body = _defs() + _legend(kinds, virtual) + x_axis(LABEL_W, plot_w, top, height, span, "simulated time")
    y = top
    for name in devices:
        body.append(_row(name, rows[name], y, ROW_H, scale, INK, virtual))
        y += ROW_H
    if channels:
        y += 8
        body.append(f'<text x="4" y="{y + 8:.1f}" fill="{MUTED}" font-weight="600">channels'
                    f'{esc(f" (busiest {len(channels)}; {hidden} more)" if hidden else "")}</text>')
        y += 14
        for name in channels:
            body.append(_row(name, rows[name], y, CHANNEL_ROW_H, scale, MUTED, virtual))
            y += CHANNEL_ROW_H
    return svg(WIDTH, y + 34, body, label)


def _row(name: str, items: list[TimelineEntry], y: float, h: float, scale: float, color: str,
         virtual: bool) -> str:
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
        kind = category(e)
        mb = e.micro_batch if e.micro_batch is not None else micro_batch(e.task)
        fill = f"url(#{WEIGHT_PATTERN})" if kind == "backward-weight" else KIND_COLORS[kind]
        data = "".join(f' data-{attr}="{value}"' for attr, value in
                       (("stage", e.stage), ("chunk", e.chunk), ("mb", mb)) if value is not None)
        shade = ' fill-opacity="0.72"' if (e.chunk or 0) % 2 and not channel else ""
        out.append(f'<rect x="{x:.1f}" y="{top}" width="{w:.1f}" height="{bar_h}" fill="{fill}"{shade} '
                   f'class="task-{kind}"{data}><title>{esc(describe(e, kind, mb))} on {where}: '
                   f'{(e.start_s * 1e3):.4g}–{(e.end_s * 1e3):.4g} ms</title></rect>')
        text = bar_text(e, mb, virtual)
        if text and not channel and w >= max(LABEL_MIN_W, LABEL_CHAR_W * len(text) + 4):
            ink = "#1f2937" if kind == "backward-weight" else "#fff"
            out.append(f'<text x="{x + w / 2:.1f}" y="{y + h * 0.72:.1f}" text-anchor="middle" font-size="9" '
                       f'fill="{ink}" pointer-events="none">{esc(text)}</text>')
    out.append("</g>")
    return "".join(out)


def describe(e: TimelineEntry, kind: str, mb: int | None) -> str:
    """A bar's tooltip: ``2W3: weight-grad of virtual stage 2 (chunk 1 of rank 0), micro-batch 3``;
    a task without its stage: ``F7 (micro-batch 7, forward)``."""
    if e.stage is not None and mb is not None:
        word = KIND_WORDS.get(e.kind or "", kind)
        where = f" (chunk {e.chunk} of rank {e.rank})" if e.chunk is not None and e.rank is not None else ""
        return f"{e.task}: {word} of virtual stage {e.stage}{where}, micro-batch {mb}"
    return f"{e.task} (micro-batch {mb}, {kind})" if mb is not None else e.task


def bar_text(e: TimelineEntry, mb: int | None, virtual: bool) -> str:
    """What a bar wide enough shows: its micro-batch, with its virtual stage (``s2:3``) when ranks run
    several stages."""
    if mb is None:
        return ""
    return f"s{e.stage}:{mb}" if virtual and e.stage is not None else str(mb)


def micro_batch(task: str) -> int | None:
    """The micro-batch of a pipeline task (``F3``, ``B3``, ``R3``, ``F3 s0->s1``), else ``None``."""
    head = task.split(" ")[0]
    if len(head) > 1 and head[0] in "FBR" and head[1:].isdigit():
        return int(head[1:])
    return None


def _defs() -> list[str]:
    """The hatch of weight-gradient bars: the backward colour with light diagonal stripes."""
    return [f'<defs><pattern id="{WEIGHT_PATTERN}" width="6" height="6" patternUnits="userSpaceOnUse" '
            f'patternTransform="rotate(45)"><rect width="6" height="6" fill="{KIND_COLORS["backward-weight"]}"/>'
            f'<rect width="2.5" height="6" fill="#fff" fill-opacity="0.55"/></pattern></defs>']


def _legend(kinds: set[str], virtual: bool) -> list[str]:
    """The kinds drawn (forward, backward, all-reduce and transfer always), then what a bar's text says."""
    out = ['<g class="legend">']
    x = LABEL_W
    for kind, text in LEGEND:
        if kind not in kinds and kind not in ALWAYS_IN_LEGEND:
            continue
        fill = f"url(#{WEIGHT_PATTERN})" if kind == "backward-weight" else KIND_COLORS[kind]
        out.append(f'<rect x="{x:.0f}" y="4" width="10" height="10" fill="{fill}" data-legend="{kind}"/>'
                   f'<text x="{x + 14:.0f}" y="13" fill="{MUTED}">{esc(text)}</text>')
        x += 14 + LABEL_CHAR_W * 1.15 * len(text) + 12
    note = "bar text: s<virtual stage>:<micro-batch>; lighter bars: odd chunks" if virtual else \
        "bar text: micro-batch"
    out.append(f'<text x="{x + 6:.0f}" y="13" fill="{MUTED}">{esc(note)}</text></g>')
    return out
