"""Loss goes down, and it is the same model: a 2-stage GPT-2 against the single-process model (docs/benchmarks.md).

``.venv/bin/python -m bench.bench_loss_curve [--out DIR] [--steps 200]``:

1. ``placer extract --example gpt2`` (4 layers, hidden 128, 4 heads, seq 64, vocab 1000, dropout
   0; micro-batch 8 rows) on the CPU;
2. ``placer solve --solver parmesan --stages 2 --micro-batches 2`` on two CPU devices;
3. the bundle under ``torchrun --standalone --nproc-per-node 2`` (gloo, one thread each) for
   ``--steps`` optimizer steps on the project's own docs (``--data text:``, byte-level), AdamW,
   warm-up 20 steps, cosine decay, clipping at global norm 1.0, float32;
4. the same training in one process from the same seed (:func:`launcher.verify.reference_losses`),
   on one thread as each pipeline process;
5. prints the largest relative difference of the two loss curves over all steps (the pipeline's
   losses at full precision from ``metrics.json``) and how many steps agree to the bit, writes both
   curves to ``DIR/loss_curve.json`` and an SVG plot to ``docs/img/loss_curve.svg``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from cli import main as placer
from launcher.verify import Training, reference_losses
from solvers.model.documents import load_plan

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ["layers=4", "hidden=128", "heads=4", "seq=64", "vocab=1000", "dropout=0"]


def corpus(out: Path) -> Path:
    """The project's docs, concatenated (a few hundred kB of English and code)."""
    path = out / "docs.txt"
    path.write_bytes(b"\n".join(p.read_bytes() for p in sorted((ROOT / "docs").glob("*.md"))))
    return path


def topology(out: Path) -> Path:
    devices = [{"id": f"cpu{i}", "kind": "cpu", "node": "h0", "memory_bytes": 8e9} for i in range(2)]
    links = [{"src": "cpu0", "dst": "cpu1", "bandwidth_Bps": 1e12, "latency_s": 1e-9}]
    path = out / "topo.json"
    path.write_text(json.dumps({"format": "placer.topology/v1", "name": "cpu2", "devices": devices, "links": links}))
    return path


def run(out: Path, steps: int) -> dict[str, object]:
    graph, plan, folder = out / "gpt2.json", out / "plan.json", out / "run"
    assert placer(["extract", "--example", "gpt2", "--param", *PARAMS, "--batch", "8", "--device-kind", "cpu",
                   "-o", str(graph)]) == 0
    assert placer(["solve", "--solver", "parmesan", "--graph", str(graph), "--topology", str(topology(out)),
                   "--stages", "2", "--micro-batches", "2", "--quiet", "-o", str(plan)]) == 0
    assert placer(["launcher", "build", "--plan", str(plan), "--graph", str(graph), "-o", str(folder)]) == 0
    training = Training(steps=steps, data=f"text:{corpus(out)}", lr=1e-3, lr_warmup=20, lr_decay="cosine",
                        clip_norm=1.0)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "launch.py", "--warmup", "0", *training.launch_args()], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=3600, check=False)
    if done.returncode:
        raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
    pipelined_s = time.perf_counter() - started
    # the last stage's losses at full precision (the log prints 6 digits)
    ranks = json.loads((folder / "metrics.json").read_text())["ranks"]
    losses = [float(x) for x in next(r["losses"] for r in ranks if r["losses"] and r["losses"][0] is not None)]
    started = time.perf_counter()
    manifest = json.loads((folder / "manifest.json").read_text())
    single = reference_losses(manifest, load_plan(plan), training)  # on one thread, as every rank
    single_s = time.perf_counter() - started
    differences = [abs(a - b) / abs(b) for a, b in zip(losses, single, strict=True)]
    worst = max(differences)
    stages = [len(s["ops"]) for s in json.loads(plan.read_text())["stages"]]
    return {"steps": steps, "stage_ops": stages, "pipelined": losses, "single": single,
            "max_relative_difference": worst, "worst_step": differences.index(worst),
            "equal_steps": sum(a == b for a, b in zip(losses, single, strict=True)), "pipelined_s": pipelined_s, "single_s": single_s}


def svg(result: dict[str, object], path: Path) -> None:
    """Both curves (pipelined solid, single process dashed) on one plot."""
    pipelined, single = result["pipelined"], result["single"]
    assert isinstance(pipelined, list) and isinstance(single, list)
    lo, hi = min(pipelined + single), max(pipelined + single)
    width, height, pad = 640, 320, 40

    def points(values: list[float]) -> str:
        n = max(1, len(values) - 1)
        return " ".join(f"{pad + i * (width - 2 * pad) / n:.1f},{height - pad - (v - lo) * (height - 2 * pad) / (hi - lo):.1f}"
                        for i, v in enumerate(values))

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="12">\n'
        f'<rect width="{width}" height="{height}" fill="white"/>\n'
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="black"/>\n'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="black"/>\n'
        f'<text x="{width / 2}" y="{height - 8}" text-anchor="middle">step (0..{len(pipelined) - 1})</text>\n'
        f'<text x="4" y="{pad - 8}">loss {hi:.2f}</text><text x="4" y="{height - pad + 14}">{lo:.2f}</text>\n'
        f'<polyline points="{points(pipelined)}" fill="none" stroke="#1f77b4" stroke-width="2"/>\n'
        f'<polyline points="{points(single)}" fill="none" stroke="#d62728" stroke-width="1" stroke-dasharray="4 3"/>\n'
        f'<text x="{width - pad}" y="{pad}" text-anchor="end" fill="#1f77b4">2-stage pipeline (torchrun)</text>\n'
        f'<text x="{width - pad}" y="{pad + 16}" text-anchor="end" fill="#d62728">single process</text>\n'
        "</svg>\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/bench_loss_curve")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = run(out, args.steps)
    (out / "loss_curve.json").write_text(json.dumps(result, indent=1))
    svg(result, ROOT / "docs" / "img" / "loss_curve.svg")
    pipelined, single = result["pipelined"], result["single"]
    assert isinstance(pipelined, list) and isinstance(single, list)
    print(f"stages (ops): {result['stage_ops']}; steps: {len(pipelined)}")
    for step in (0, 1, 10, 50, 100, 150, len(pipelined) - 1):
        if step < len(pipelined):
            print(f"step {step}: pipelined {pipelined[step]:.6f}, single {single[step]:.6f}")
    print(f"largest relative difference over all steps: {result['max_relative_difference']:.3g} "
          f"(step {result['worst_step']}); steps with equal losses (to the bit): {result['equal_steps']}")
    print(f"torchrun {result['pipelined_s']:.1f} s, single process {result['single_s']:.1f} s")


if __name__ == "__main__":
    main()
