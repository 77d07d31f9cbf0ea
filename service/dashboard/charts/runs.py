"""A run measured beside the simulation: per row (the iteration, every stage, every device) a
simulated bar over a measured one, on the simulated timeline's scale (same width, same seconds
per pixel), each with its relative error."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from markupsafe import Markup

from service.dashboard.charts.gantt import LABEL_W, WIDTH
from service.dashboard.charts.svg import INK, KIND_COLORS, MUTED, esc, svg, time_label, x_axis
from service.dashboard.run_view import TimeBar

MEASURED = "#c4574f"
ROW_H = 26.0
CHAR_W = 6.2  # about one character of the 11 px font


def span_s(bars: Sequence[TimeBar]) -> float:
    """The longest figure: the time axis must reach it."""
    return max([b.measured_s or 0.0 for b in bars] + [b.simulated_s or 0.0 for b in bars] + [0.0])


def _ms(value: float | None) -> str:
    return "–" if value is None else time_label(value, 1e-3 if value >= 1e-3 else 1e-6)


def measured_chart(bars: Sequence[TimeBar], axis_span_s: float) -> Markup:
    """Simulated (blue, upper) and measured (red, lower) bar per row, from 0 on an axis of
    ``axis_span_s`` seconds (at least the longest figure) drawn as wide as the timeline's (the Gantt
    chart's ``WIDTH`` and ``LABEL_W``): with the same span, a second is as wide in both charts."""
    span = max(axis_span_s, span_s(bars)) or 1.0
    plot_w = WIDTH - LABEL_W - 10
    scale = plot_w / span
    top = 24.0
    height = len(bars) * ROW_H + sum(8.0 for a, b in itertools.pairwise(bars) if a.group != b.group)
    body = [f'<rect x="{LABEL_W:.0f}" y="4" width="10" height="10" fill="{KIND_COLORS["forward"]}"/>'
            f'<text x="{LABEL_W + 14:.0f}" y="13" fill="{MUTED}">simulated</text>'
            f'<rect x="{LABEL_W + 90:.0f}" y="4" width="10" height="10" fill="{MEASURED}"/>'
            f'<text x="{LABEL_W + 104:.0f}" y="13" fill="{MUTED}">measured</text>']
    body += x_axis(LABEL_W, scale * span, top, height, span, "seconds per iteration (the timeline's scale)")
    y = top
    for i, b in enumerate(bars):
        if i and bars[i - 1].group != b.group:
            y += 8.0
        error = b.relative_error
        note = (f"measured {_ms(b.measured_s)}, simulated {_ms(b.simulated_s)}"
                + (f", {error:+.0%}" if error is not None else ""))
        body.append(f'<g class="run-row" data-key="{esc(b.key)}"><text x="{LABEL_W - 6:.0f}" y="{y + ROW_H * 0.6:.1f}" '
                    f'text-anchor="end" fill="{INK}">{esc(b.label)}</text>')
        for value, color, dy, what in ((b.simulated_s, KIND_COLORS["forward"], 2.0, "simulated"),
                                       (b.measured_s, MEASURED, ROW_H / 2, "measured")):
            if value is not None:
                body.append(f'<rect class="{what}" x="{LABEL_W:.0f}" y="{y + dy:.1f}" width="{max(value * scale, 0.6):.1f}" '
                            f'height="{ROW_H / 2 - 3:.1f}" fill="{color}"><title>{esc(b.label)} {what}: '
                            f'{_ms(value)} ({esc(b.key)})</title></rect>')
        end = LABEL_W + max(b.simulated_s or 0.0, b.measured_s or 0.0) * scale
        if end + 6 + CHAR_W * len(note) <= WIDTH:  # beside the longer bar, else over it, ending where it ends
            place = f'x="{end + 6:.1f}" fill="{MUTED}"'
        else:
            place = f'x="{end - 6:.1f}" text-anchor="end" fill="#fff" font-weight="600"'
        body.append(f'<text class="note" {place} y="{y + ROW_H * 0.6:.1f}">{esc(note)}</text></g>')
        y += ROW_H
    return svg(WIDTH, y + 34, body, "measured beside simulated: iteration, stages and devices, per iteration")
