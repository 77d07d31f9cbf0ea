"""Horizontal bar charts: the comparison key per solver against each plan's own lower bound,
compute and communication per stage, peak memory per device against its capacity."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup

from service.dashboard.charts.svg import GRID, INK, KIND_COLORS, MUTED, esc, stage_color, svg, x_axis
from service.dashboard.plan_view import DeviceMemory, StageBar
from service.schemas import ComparisonRow

WIDTH = 1100.0
SMALL_WIDTH = 560.0  # the stage and memory charts sit side by side
LABEL_W = 130.0
BAR_H = 20.0
GAP = 6.0
BEST = "#2f7d4f"
BOUND = "#c4574f"


CHART_UNITS = {"time_per_sample_s": ("time per sample", "/sample"), "iteration_s": ("iteration time", ""),
               "latency_s": ("latency", "")}


def _seconds(value: float) -> str:
    """Milliseconds, or microseconds below one millisecond (time per sample is often there)."""
    return f"{value * 1e3:.4g} ms" if value >= 1e-3 else f"{value * 1e6:.4g} µs"


def objective_chart(rows: Sequence[ComparisonRow], best: str | None, ranked_by: str) -> Markup:
    """One bar per solver with a plan: its comparison key (``key_s``: seconds per sample, or per
    iteration with a fixed global batch, or the latency; ``ranked_by`` says which), and on each
    bar a tick at that plan's own lower bound in the same unit (``lower_bound_key_s``) — plans of
    different micro-batch counts have different bounds, so no single line is drawn."""
    shown = [r for r in rows if r.key_s is not None and r.status in ("optimal", "feasible")]
    name, suffix = CHART_UNITS.get(ranked_by, ("objective", ""))
    span = max([max(r.key_s or 0.0, r.lower_bound_key_s or 0.0) for r in shown] + [0.0]) * 1.12 or 1.0
    plot_w = WIDTH - LABEL_W - 110
    label = f"{name} per solver (lower is better), each against its own lower bound"
    top = 22.0
    height = max(1, len(shown)) * (BAR_H + GAP)
    body = x_axis(LABEL_W, plot_w, top, height, span, f"seconds{' per sample' if suffix else ''}")
    body.append(f'<line x1="{LABEL_W:.0f}" y1="6" x2="{LABEL_W:.0f}" y2="16" stroke="{BOUND}" stroke-width="2"/>'
                f'<text x="{LABEL_W + 6:.0f}" y="15" fill="{BOUND}">the plan\'s lower bound</text>')
    y = top + GAP / 2
    for r in shown:
        key = r.key_s or 0.0
        w = key / span * plot_w
        color = BEST if r.solver == best else KIND_COLORS["forward"]
        body.append(f'<g class="solver-bar" data-solver="{esc(r.solver)}">'
                    f'<text x="{LABEL_W - 6:.0f}" y="{y + BAR_H * 0.7:.1f}" text-anchor="end" fill="{INK}">'
                    f'{esc(r.solver)}</text>'
                    f'<rect x="{LABEL_W:.0f}" y="{y:.1f}" width="{max(w, 0.5):.1f}" height="{BAR_H:.0f}" '
                    f'fill="{color}"><title>{esc(r.solver)}: {_seconds(key)}{suffix}</title></rect>'
                    f'<text x="{LABEL_W + max(w, (r.lower_bound_key_s or 0.0) / span * plot_w) + 6:.1f}" '
                    f'y="{y + BAR_H * 0.7:.1f}" fill="{MUTED}">'
                    f'{_seconds(key)}{suffix}{" (best)" if r.solver == best else ""}</text>')
        if r.lower_bound_key_s is not None:
            x = LABEL_W + r.lower_bound_key_s / span * plot_w
            body.append(f'<line class="bound" x1="{x:.1f}" y1="{y - 2:.1f}" x2="{x:.1f}" y2="{y + BAR_H + 2:.1f}" '
                        f'stroke="{BOUND}" stroke-width="2"><title>{esc(r.solver)}: lower bound '
                        f'{_seconds(r.lower_bound_key_s)}{suffix}</title></line>')
        body.append('</g>')
        y += BAR_H + GAP
    if not shown:
        body.append(f'<text x="{LABEL_W:.0f}" y="{top + 16:.0f}" fill="{MUTED}">no plan yet</text>')
    return svg(WIDTH, top + height + 36, body, label)


def stage_chart(stages: Sequence[StageBar]) -> Markup:
    """Compute and communication per stage and micro-batch, stacked."""
    span = max((s.compute_s + s.comm_s for s in stages), default=0.0) * 1.05 or 1.0
    plot_w = SMALL_WIDTH - LABEL_W - 20
    top = 22.0
    height = max(1, len(stages)) * (BAR_H + GAP)
    body = [f'<rect x="{LABEL_W:.0f}" y="4" width="10" height="10" fill="{KIND_COLORS["forward"]}"/>'
            f'<text x="{LABEL_W + 14:.0f}" y="13" fill="{MUTED}">compute</text>'
            f'<rect x="{LABEL_W + 90:.0f}" y="4" width="10" height="10" fill="{KIND_COLORS["transfer"]}"/>'
            f'<text x="{LABEL_W + 104:.0f}" y="13" fill="{MUTED}">communication</text>']
    body += x_axis(LABEL_W, plot_w, top, height, span, "seconds per micro-batch")
    y = top + GAP / 2
    for s in stages:
        wc = s.compute_s / span * plot_w
        wm = s.comm_s / span * plot_w
        body.append(f'<text x="{LABEL_W - 6:.0f}" y="{y + BAR_H * 0.7:.1f}" text-anchor="end" fill="{INK}">'
                    f'stage {s.stage} ({len(s.devices)}×)</text>'
                    f'<rect x="{LABEL_W:.0f}" y="{y:.1f}" width="{wc:.2f}" height="{BAR_H:.0f}" '
                    f'fill="{KIND_COLORS["forward"]}"><title>stage {s.stage} compute {s.compute_s * 1e3:.4g} ms'
                    f'</title></rect>'
                    f'<rect x="{LABEL_W + wc:.2f}" y="{y:.1f}" width="{wm:.2f}" height="{BAR_H:.0f}" '
                    f'fill="{KIND_COLORS["transfer"]}"><title>stage {s.stage} communication '
                    f'{s.comm_s * 1e3:.4g} ms</title></rect>')
        y += BAR_H + GAP
    return svg(SMALL_WIDTH, top + height + 36, body, "compute and communication per stage")


def memory_chart(devices: Sequence[DeviceMemory]) -> Markup:
    """Peak memory per device (coloured by stage) against its usable capacity (outline)."""
    span = max([d.capacity_bytes for d in devices] + [d.peak_bytes for d in devices] + [1.0])
    label_w = 70.0
    plot_w = SMALL_WIDTH - label_w - 150
    top = 6.0
    bar_h = 14.0
    y = top
    body = []
    for d in devices:
        cap_w = d.capacity_bytes / span * plot_w
        use_w = d.peak_bytes / span * plot_w
        over = d.capacity_bytes and d.peak_bytes > d.capacity_bytes
        pct = f"{d.peak_bytes / d.capacity_bytes * 100:.0f} %" if d.capacity_bytes else ""
        body.append(f'<text x="{label_w - 6:.0f}" y="{y + bar_h * 0.8:.1f}" text-anchor="end" fill="{INK}">'
                    f'{esc(d.device)}</text>'
                    f'<rect x="{label_w:.0f}" y="{y:.1f}" width="{cap_w:.1f}" height="{bar_h:.0f}" fill="#f3f4f6" '
                    f'stroke="{GRID}"/>'
                    f'<rect x="{label_w:.0f}" y="{y:.1f}" width="{use_w:.1f}" height="{bar_h:.0f}" '
                    f'fill="{BOUND if over else stage_color(d.stage)}"><title>{esc(d.device)}: '
                    f'{d.peak_bytes / 2**30:.3g} GiB of {d.capacity_bytes / 2**30:.3g} GiB</title></rect>'
                    f'<text x="{label_w + plot_w + 8:.1f}" y="{y + bar_h * 0.8:.1f}" fill="{MUTED}">'
                    f'{d.peak_bytes / 2**30:.3g} / {d.capacity_bytes / 2**30:.3g} GiB {pct}</text>')
        y += bar_h + 4
    return svg(SMALL_WIDTH, y + 6, body, "peak memory per device against capacity")
