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
UNPROVEN = "#b8bec7"  # a plan whose status is unknown or infeasible
SHORT_AXES = {"micro_batches": "mb"}


CHART_UNITS = {"time_per_sample_s": ("time per sample", "/sample"), "iteration_s": ("iteration time", ""),
               "latency_s": ("latency", "")}


def _seconds(value: float) -> str:
    """Milliseconds, or microseconds below one millisecond (time per sample is often there)."""
    return f"{value * 1e3:.4g} ms" if value >= 1e-3 else f"{value * 1e6:.4g} µs"


def row_label(r: ComparisonRow) -> str:
    """A row's name in charts: the solver, and its swept values in a sweep."""
    return r.solver + "".join(f" {SHORT_AXES.get(k, k)}={v}" for k, v in r.swept.items())


def _why(r: ComparisonRow) -> str:
    """Why a row has no bar of its own colour: its plan's status and reason, or its job's state."""
    if r.plan_id is None:
        return r.error.title if r.error is not None else r.job_status
    reason = f": {r.status_reason}" if r.status_reason else ""
    return f"{r.status}{reason}"


def objective_chart(rows: Sequence[ComparisonRow], best_job_id: str | None, ranked_by: str) -> Markup:
    """One bar per row, in the order given (ranked): its comparison key (``key_s``: seconds per
    sample, or per iteration with a fixed global batch, or the latency; ``ranked_by`` says which),
    and on each bar a tick at that plan's own lower bound in the same unit (``lower_bound_key_s``)
    — plans of different micro-batch counts have different bounds, so no single line is drawn.
    A plan that is neither optimal nor feasible is drawn grey with why (an ``unknown`` plan of
    the exact solver past its budget is ``even``'s split); a row without a plan says its job's state."""
    name, suffix = CHART_UNITS.get(ranked_by, ("objective", ""))
    span = max([max(r.key_s or 0.0, r.lower_bound_key_s or 0.0) for r in rows] + [0.0]) * 1.12 or 1.0
    label_w = max(LABEL_W, min(260.0, 7.0 * max((len(row_label(r)) for r in rows), default=0) + 12))
    plot_w = WIDTH - label_w - 240
    label = f"{name} per solver (lower is better), each against its own lower bound"
    top = 22.0
    height = max(1, len(rows)) * (BAR_H + GAP)
    body = x_axis(label_w, plot_w, top, height, span, f"seconds{' per sample' if suffix else ''}")
    body.append(f'<line x1="{label_w:.0f}" y1="6" x2="{label_w:.0f}" y2="16" stroke="{BOUND}" stroke-width="2"/>'
                f'<text x="{label_w + 6:.0f}" y="15" fill="{BOUND}">the plan\'s lower bound</text>'
                f'<rect x="{label_w + 170:.0f}" y="6" width="10" height="10" fill="{UNPROVEN}"/>'
                f'<text x="{label_w + 184:.0f}" y="15" fill="{MUTED}">status unknown or infeasible</text>')
    y = top + GAP / 2
    for r in rows:
        good = r.status in ("optimal", "feasible")
        text_y = f"{y + BAR_H * 0.7:.1f}"
        body.append(f'<g class="solver-bar" data-solver="{esc(r.solver)}" data-job="{esc(r.job_id)}" '
                    f'data-status="{esc(r.status or r.job_status)}">'
                    f'<text x="{label_w - 6:.0f}" y="{text_y}" text-anchor="end" fill="{INK}">{esc(row_label(r))}</text>')
        if r.key_s is None:
            body.append(f'<text class="why" x="{label_w + 4:.0f}" y="{text_y}" fill="{MUTED}">no plan: '
                        f'{esc(_why(r))}</text></g>')
            y += BAR_H + GAP
            continue
        key = r.key_s
        w = key / span * plot_w
        color = (BEST if r.job_id == best_job_id else KIND_COLORS["forward"]) if good else UNPROVEN
        note = " (best)" if r.job_id == best_job_id else ("" if good else f" — {_why(r)}")
        shown_note = note if len(note) <= 70 else note[:69] + "…"
        body.append(f'<rect x="{label_w:.0f}" y="{y:.1f}" width="{max(w, 0.5):.1f}" height="{BAR_H:.0f}" '
                    f'fill="{color}"><title>{esc(row_label(r))}: {_seconds(key)}{suffix}{esc(note)}</title></rect>'
                    f'<text class="{"value" if good else "why"}" '
                    f'x="{label_w + max(w, (r.lower_bound_key_s or 0.0) / span * plot_w) + 6:.1f}" y="{text_y}" '
                    f'fill="{MUTED}">{_seconds(key)}{suffix}{esc(shown_note)}<title>{esc(note)}</title></text>')
        if r.lower_bound_key_s is not None:
            x = label_w + r.lower_bound_key_s / span * plot_w
            body.append(f'<line class="bound" x1="{x:.1f}" y1="{y - 2:.1f}" x2="{x:.1f}" y2="{y + BAR_H + 2:.1f}" '
                        f'stroke="{BOUND}" stroke-width="2"><title>{esc(row_label(r))}: lower bound '
                        f'{_seconds(r.lower_bound_key_s)}{suffix}</title></line>')
        body.append('</g>')
        y += BAR_H + GAP
    if not rows:
        body.append(f'<text x="{label_w:.0f}" y="{top + 16:.0f}" fill="{MUTED}">no plan yet</text>')
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
