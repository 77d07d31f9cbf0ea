"""Topology charts: the heat map of pair bandwidths and the plan's mapping onto hosts."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from markupsafe import Markup

from service.dashboard.charts.svg import INK, MUTED, esc, stage_color, svg
from solvers.model.topology import Topology

MAX_HEATMAP_DEVICES = 128


def _shade(value: float, lo: float, hi: float) -> str:
    """White (low) to deep blue (high) on a log scale."""
    if value <= 0:
        return "#ffffff"
    f = 1.0 if hi <= lo else (math.log(value) - math.log(lo)) / (math.log(hi) - math.log(lo))
    r, g, b = (int(247 - f * (247 - c)) for c in (30, 80, 150))
    return f"#{r:02x}{g:02x}{b:02x}"


def bandwidth_heatmap(topology: Topology) -> Markup:
    """Pair bandwidths (effective, widest path) as a matrix of coloured cells, first
    ``MAX_HEATMAP_DEVICES`` devices."""
    n = min(topology.n_devices, MAX_HEATMAP_DEVICES)
    bw = topology.bandwidth_Bps
    ids = [d.id for d in topology.devices[:n]]
    cell = max(4.0, min(44.0, 640.0 / max(n, 1)))
    label_w = 70.0 if cell >= 10 else 0.0
    values = [float(bw[i][j]) for i in range(n) for j in range(n) if i != j and bw[i][j] > 0]
    lo, hi = (min(values), max(values)) if values else (1.0, 1.0)
    body = []
    for i in range(n):
        y = label_w + i * cell
        if label_w:
            body.append(f'<text x="{label_w - 4:.0f}" y="{y + cell * 0.7:.1f}" text-anchor="end" '
                        f'fill="{INK}">{esc(ids[i])}</text>')
            body.append(f'<text transform="translate({label_w + i * cell + cell * 0.7:.1f},{label_w - 4:.0f}) '
                        f'rotate(-60)" fill="{INK}">{esc(ids[i])}</text>')
        for j in range(n):
            v = float(bw[i][j])
            color = "#e5e7eb" if i == j else _shade(v, lo, hi)
            tip = "" if i == j else f"<title>{esc(ids[i])} → {esc(ids[j])}: {v / 1e9:.4g} GB/s</title>"
            body.append(f'<rect x="{label_w + j * cell:.1f}" y="{y:.1f}" width="{cell:.1f}" height="{cell:.1f}" '
                        f'fill="{color}" stroke="#ffffff" stroke-width="0.5">{tip}</rect>')
    size = label_w + n * cell
    lx = size + 16
    for k, f in enumerate((0.0, 0.5, 1.0)):
        v = math.exp(math.log(lo) + f * (math.log(hi) - math.log(lo))) if values else 0.0
        body.append(f'<rect x="{lx:.0f}" y="{label_w + k * 22:.0f}" width="14" height="14" '
                    f'fill="{_shade(v, lo, hi)}" stroke="#d1d5db"/><text x="{lx + 20:.0f}" '
                    f'y="{label_w + k * 22 + 11:.0f}" fill="{MUTED}">{v / 1e9:.3g} GB/s</text>')
    return svg(lx + 110, size + 8, body, "bandwidth between every pair of devices (row sends to column)")


def mapping_chart(topology: Topology, stages_of: Mapping[str, Sequence[int]], ops_per_stage: Sequence[int]) -> Markup:
    """Hosts as boxes, their devices as tiles coloured by the (first) stage placed on them and naming
    every stage they run (``stages 0, 7``: the virtual stages of an interleaved or V-shaped schedule)."""
    hosts: dict[str, list[str]] = {}
    for d in topology.devices:
        hosts.setdefault(d.node, []).append(d.id)
    tile_w, tile_h, pad = 74.0, 38.0, 8.0
    per_row = 8
    width = 1100.0
    x, y = 0.0, 0.0
    row_h = 0.0
    body = []
    for host, devices in hosts.items():
        cols = min(per_row, len(devices))
        rows = math.ceil(len(devices) / per_row)
        box_w = cols * (tile_w + pad) + pad
        box_h = rows * (tile_h + pad) + pad + 18
        if x + box_w > width and x > 0:
            x, y = 0.0, y + row_h + 12
            row_h = 0.0
        body.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="{box_w:.0f}" height="{box_h:.0f}" rx="6" '
                    f'fill="#f9fafb" stroke="#d1d5db"/><text x="{x + pad:.0f}" y="{y + 14:.0f}" fill="{MUTED}" '
                    f'font-weight="600">{esc(host)}</text>')
        for k, dev in enumerate(devices):
            tx = x + pad + (k % per_row) * (tile_w + pad)
            ty = y + 18 + pad + (k // per_row) * (tile_h + pad)
            stages = list(stages_of.get(dev, ()))
            stage = stages[0] if stages else None
            text_fill = "#ffffff" if stage is not None else MUTED
            what = "idle" if not stages else f"stage{'s' if len(stages) > 1 else ''} {', '.join(map(str, stages))}"
            tip = f"{dev}: {what}" + (f", {sum(ops_per_stage[k] for k in stages)} ops" if stages else "")
            body.append(f'<g><rect x="{tx:.0f}" y="{ty:.0f}" width="{tile_w:.0f}" height="{tile_h:.0f}" rx="4" '
                        f'fill="{stage_color(stage)}"/><text x="{tx + tile_w / 2:.0f}" y="{ty + 15:.0f}" '
                        f'text-anchor="middle" fill="{text_fill}">{esc(dev)}</text><text x="{tx + tile_w / 2:.0f}" '
                        f'y="{ty + 30:.0f}" text-anchor="middle" fill="{text_fill}">{esc(what)}</text>'
                        f'<title>{esc(tip)}</title></g>')
        x += box_w + 12
        row_h = max(row_h, box_h)
    return svg(width, y + row_h + 4, body, "the plan's stages on the topology's hosts and devices")
