"""Small helpers shared by the SVG charts: escaping, number formatting, palettes, axes."""

from __future__ import annotations

import math

from markupsafe import Markup, escape

KIND_COLORS = {"forward": "#3b6fb6", "backward": "#2f9e8f", "backward-input": "#1f6f64",
               "backward-weight": "#c4574f", "recompute": "#8a6fbf", "allreduce": "#d08a2c", "transfer": "#9aa5b1",
               "op": "#3b6fb6"}
STAGE_COLORS = ("#3b6fb6", "#2f9e8f", "#d08a2c", "#8a6fbf", "#c4574f", "#5d8a3a", "#b0679a", "#4f8fb0",
                "#9c7a3c", "#6b7a8f")
INK = "#1f2937"
MUTED = "#6b7280"
GRID = "#e5e7eb"


def esc(text: object) -> str:
    return str(escape(str(text)))


def stage_color(stage: int | None) -> str:
    return "#d1d5db" if stage is None else STAGE_COLORS[stage % len(STAGE_COLORS)]


def nice_step(span: float, ticks: int = 6) -> float:
    """A 1-2-5 step giving about ``ticks`` ticks over ``span``."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 5.0, 10.0):
        if raw <= m * mag:
            return m * mag
    return 10.0 * mag


def time_label(t_s: float, step_s: float) -> str:
    if step_s >= 1.0:
        return f"{t_s:g} s"
    if step_s >= 1e-3:
        return f"{t_s * 1e3:.4g} ms"
    return f"{t_s * 1e6:.4g} µs"


def svg(width: float, height: float, body: list[str], label: str) -> Markup:
    """An accessible SVG element (``role="img"`` with its title)."""
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height:.0f}" '
            f'width="{width:.0f}" height="{height:.0f}" role="img" aria-label="{esc(label)}" class="chart" '
            f'font-family="system-ui, sans-serif" font-size="11"><title>{esc(label)}</title>')
    return Markup(head + "".join(body) + "</svg>")


def x_axis(x0: float, width: float, y: float, height: float, span: float, label: str = "") -> list[str]:
    """Vertical grid lines with time labels under them, from 0 to ``span`` seconds."""
    step = nice_step(span)
    out = []
    n = int(span / step + 1e-9) + 1 if span > 0 else 1
    for i in range(n):
        t = i * step
        x = x0 + (t / span * width if span > 0 else 0)
        out.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{y + height:.1f}" stroke="{GRID}"/>')
        out.append(f'<text x="{x:.1f}" y="{y + height + 13:.1f}" text-anchor="middle" fill="{MUTED}">'
                   f'{esc(time_label(t, step))}</text>')
    if label:
        out.append(f'<text x="{x0 + width:.1f}" y="{y + height + 27:.1f}" text-anchor="end" fill="{MUTED}">'
                   f'{esc(label)}</text>')
    return out
