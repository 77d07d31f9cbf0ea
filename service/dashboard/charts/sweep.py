"""A comparison's trade-offs: throughput against each swept setting per solver, and solve time
against quality (the comparison key) per plan."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from markupsafe import Markup

from service.dashboard.charts.svg import GRID, INK, MUTED, STAGE_COLORS, esc, nice_step, svg
from service.schemas import ComparisonRow

WIDTH = 540.0
HEIGHT = 300.0
LEFT = 64.0
RIGHT = 120.0  # the legend
TOP = 16.0
BOTTOM = 44.0
GOOD = ("optimal", "feasible")


def solver_colors(rows: Sequence[ComparisonRow]) -> dict[str, str]:
    """One colour per solver, in the rows' order."""
    names = list(dict.fromkeys(r.solver for r in rows))
    return {name: STAGE_COLORS[i % len(STAGE_COLORS)] for i, name in enumerate(names)}


def _y_axis(span: float, plot_h: float, label: str, fmt: Any) -> list[str]:
    step = nice_step(span, 5)
    out = []
    for i in range(int(span / step + 1e-9) + 1):
        y = TOP + plot_h - i * step / span * plot_h
        out.append(f'<line x1="{LEFT:.0f}" y1="{y:.1f}" x2="{WIDTH - RIGHT:.0f}" y2="{y:.1f}" stroke="{GRID}"/>'
                   f'<text x="{LEFT - 6:.0f}" y="{y + 4:.1f}" text-anchor="end" fill="{MUTED}">'
                   f'{esc(fmt(i * step))}</text>')
    out.append(f'<text x="12" y="{TOP + plot_h / 2:.0f}" fill="{MUTED}" text-anchor="middle" '
               f'transform="rotate(-90 12 {TOP + plot_h / 2:.0f})">{esc(label)}</text>')
    return out


def _legend(colors: dict[str, str]) -> list[str]:
    x = WIDTH - RIGHT + 14
    return [f'<rect x="{x:.0f}" y="{TOP + i * 16:.0f}" width="10" height="10" fill="{c}"/>'
            f'<text x="{x + 14:.0f}" y="{TOP + i * 16 + 9:.0f}" fill="{INK}">{esc(name)}</text>'
            for i, (name, c) in enumerate(colors.items())]


def throughput_by_setting(rows: Sequence[ComparisonRow], axis: str, values: Sequence[Any]) -> Markup:
    """Throughput (samples/s) of each solver's plans against the swept ``axis``, one line per
    solver; where other settings are swept too, the best plan over them at each value.  Only
    optimal and feasible plans are drawn."""
    colors = solver_colors(rows)
    best: dict[tuple[str, int], ComparisonRow] = {}
    for r in rows:
        if r.status not in GOOD or r.throughput_samples_per_s is None or r.swept.get(axis) not in values:
            continue
        at = (r.solver, list(values).index(r.swept[axis]))
        if at not in best or r.throughput_samples_per_s > (best[at].throughput_samples_per_s or 0.0):
            best[at] = r
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    span = max([r.throughput_samples_per_s or 0.0 for r in best.values()] + [0.0]) * 1.1 or 1.0
    body = _y_axis(span, plot_h, "throughput (samples/s)", lambda v: f"{v:,.0f}" if v >= 100 else f"{v:.3g}")

    def x_of(i: int) -> float:
        return LEFT + (i + 0.5) / len(values) * plot_w

    for i, value in enumerate(values):
        body.append(f'<text x="{x_of(i):.1f}" y="{TOP + plot_h + 16:.0f}" text-anchor="middle" fill="{INK}">'
                    f'{esc(value)}</text>')
    body.append(f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 8:.0f}" text-anchor="middle" fill="{MUTED}">'
                f'{esc(axis)}</text>')
    for solver, color in colors.items():
        points = sorted((i, r) for (s, i), r in best.items() if s == solver)
        coords = [(x_of(i), TOP + plot_h - (r.throughput_samples_per_s or 0.0) / span * plot_h) for i, r in points]
        if len(coords) > 1:
            body.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="'
                        + " ".join(f"{x:.1f},{y:.1f}" for x, y in coords) + '"/>')
        for (x, y), (i, r) in zip(coords, points, strict=True):
            body.append(f'<circle class="point" data-solver="{esc(solver)}" data-value="{esc(values[i])}" '
                        f'cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"><title>{esc(solver)}, {esc(axis)} '
                        f'{esc(values[i])}: {r.throughput_samples_per_s:.4g} samples/s</title></circle>')
    body += _legend(colors)
    return svg(WIDTH, HEIGHT, body, f"throughput against {axis} per solver")


def _seconds(value: float) -> str:
    if value >= 1.0:
        return f"{value:.3g} s"
    return f"{value * 1e3:.3g} ms" if value >= 1e-3 else f"{value * 1e6:.3g} µs"


def solve_time_against_quality(rows: Sequence[ComparisonRow], key_unit: str) -> Markup:
    """One point per plan: its solve time (log scale) against its comparison key (lower is
    better), so that a slow solver is worth waiting for only when its point is lower.  Plans
    whose status is unknown are drawn hollow."""
    colors = solver_colors(rows)
    shown = [r for r in rows if r.key_s is not None and r.solve_time_s is not None
             and r.status in (*GOOD, "unknown")]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    times = [max(r.solve_time_s or 0.0, 1e-4) for r in shown] or [1e-3, 1.0]
    lo, hi = math.floor(math.log10(min(times))), math.ceil(math.log10(max(times)))
    hi = max(hi, lo + 1)
    span = max(r.key_s or 0.0 for r in shown) * 1.1 if shown else 1.0
    body = _y_axis(span, plot_h, key_unit, _seconds)
    for decade in range(lo, hi + 1):
        x = LEFT + (decade - lo) / (hi - lo) * plot_w
        body.append(f'<line x1="{x:.1f}" y1="{TOP:.0f}" x2="{x:.1f}" y2="{TOP + plot_h:.0f}" stroke="{GRID}"/>'
                    f'<text x="{x:.1f}" y="{TOP + plot_h + 16:.0f}" text-anchor="middle" fill="{MUTED}">'
                    f'{esc(_seconds(10.0 ** decade))}</text>')
    body.append(f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 8:.0f}" text-anchor="middle" fill="{MUTED}">'
                f'solve time (log scale)</text>')
    for r in shown:
        t = max(r.solve_time_s or 0.0, 1e-4)
        x = LEFT + (math.log10(t) - lo) / (hi - lo) * plot_w
        y = TOP + plot_h - (r.key_s or 0.0) / span * plot_h
        color = colors[r.solver]
        fill = color if r.status in GOOD else "#fff"
        swept = "".join(f", {k} {v}" for k, v in r.swept.items())
        body.append(f'<circle class="point" data-solver="{esc(r.solver)}" data-status="{esc(r.status)}" '
                    f'cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{fill}" stroke="{color}" stroke-width="2">'
                    f'<title>{esc(r.solver)}{esc(swept)} ({esc(r.status)}): {_seconds(r.key_s or 0.0)} in '
                    f'{_seconds(r.solve_time_s or 0.0)} of solving</title></circle>')
    if not shown:
        body.append(f'<text x="{LEFT + 8:.0f}" y="{TOP + 20:.0f}" fill="{MUTED}">no plan yet</text>')
    body += _legend(colors)
    return svg(WIDTH, HEIGHT, body, f"solve time against {key_unit} per plan (lower is better)")
