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
BAR_H = 9.0
ROW_H = 38.0  # the simulated bar, the measured bar under it, and the figures under both


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
        body.append(f'<g class="run-row" data-key="{esc(b.key)}"><text x="{LABEL_W - 6:.0f}" y="{y + BAR_H + 4:.1f}" '
                    f'text-anchor="end" fill="{INK}">{esc(b.label)}</text>')
        for value, color, dy, what in ((b.simulated_s, KIND_COLORS["forward"], 0.0, "simulated"),
                                       (b.measured_s, MEASURED, BAR_H + 1, "measured")):
            if value is not None:
                body.append(f'<rect class="{what}" x="{LABEL_W:.0f}" y="{y + dy:.1f}" width="{max(value * scale, 0.6):.1f}" '
                            f'height="{BAR_H:.0f}" fill="{color}"><title>{esc(b.label)} {what}: '
                            f'{_ms(value)} ({esc(b.key)})</title></rect>')
        body.append(f'<text class="note" x="{LABEL_W + 2:.0f}" y="{y + BAR_H * 2 + 12:.1f}" font-size="10" '
                    f'fill="{MUTED}">{esc(note)}</text></g>')
        y += ROW_H
    return svg(WIDTH, y + 34, body, "measured beside simulated: iteration, stages and devices, per iteration")
