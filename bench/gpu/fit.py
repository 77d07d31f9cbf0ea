"""Fit a calibration on one model's GPU run and predict the others (``bench/gpu/check.py --keep DIR``).

``python -m bench.gpu.fit DIR`` where ``DIR/<model>/`` holds ``graph.json`` (profiled), ``roofline.json``
(``placer extract``'s estimate of the same model), ``topology.json``, ``plan.json``, ``run.json`` and
``metrics.json`` as the check copied them; the measured iteration is run.json's (``summary.iteration_s``). Prints

1. per model and op class (:data:`solvers.calibration.OP_CLASSES`), the profiled forward+backward
   time against the roofline estimate: how far the estimate is from the GPU, class by class;
2. for each model, ``placer calibrate`` on that model's run alone (its residuals before and after the
   fit), then every model's iteration time simulated with that calibration against measured: the
   fitted model's own error and the held-out ones'; then the same fitted on all the runs together.

Needs scipy (the calibration's least squares); the GPU machine may lack it, so this runs on the
returned files where it does not.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from solvers.calibration import OP_CLASSES, op_class


def class_times_s(graph_path: Path) -> dict[str, float]:
    """Forward plus backward seconds per op class of a graph file."""
    totals: dict[str, float] = defaultdict(float)
    for node in json.loads(graph_path.read_text())["nodes"]:
        totals[op_class(node["op"])] += float(node.get("fwd_s", 0.0)) + float(node.get("bwd_s", 0.0))
    return totals


def roofline_lines(model: str, folder: Path) -> list[str]:
    profiled, roofline = class_times_s(folder / "graph.json"), class_times_s(folder / "roofline.json")
    lines = [f"{model}: op class    profiled     roofline   profiled / roofline"]
    for cls in (*OP_CLASSES, "total"):
        p = sum(profiled.values()) if cls == "total" else profiled.get(cls, 0.0)
        r = sum(roofline.values()) if cls == "total" else roofline.get(cls, 0.0)
        ratio = f"{p / r:.2f}" if r > 0 else "-"
        lines.append(f"  {cls:<12} {p * 1e3:9.3f} ms {r * 1e3:9.3f} ms   {ratio}")
    return lines


def placer(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, check=False)


def simulated_iteration_s(folder: Path, calibration: Path | None) -> float:
    extra = ["--calibration", str(calibration)] if calibration is not None else []
    done = placer("simulate", "--graph", str(folder / "graph.json"), "--topology", str(folder / "topology.json"),
                  "--plan", str(folder / "plan.json"), "--json", *extra)
    if done.returncode:
        raise SystemExit(f"simulate {folder.name}: {done.stderr.strip()}")
    return float(json.loads(done.stdout)["iteration_s"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="the check's --keep folder")
    args = parser.parse_args(argv)
    models = sorted(p.name for p in args.folder.iterdir() if (p / "run.json").exists() and (p / "graph.json").exists())
    if not models:
        raise SystemExit(f"{args.folder}: no <model>/run.json with its graph.json")
    print("## roofline against profiled, per op class (forward + backward of one micro-batch)")
    for model in models:
        if (args.folder / model / "roofline.json").exists():
            print("\n".join(roofline_lines(model, args.folder / model)))
    measured = {m: float(json.loads((args.folder / m / "run.json").read_text())["summary"]["iteration_s"]) for m in models}
    print("## calibration fitted on one model's run, iteration time predicted for each")
    print("  fitted on   model     measured    uncalibrated (ratio)    calibrated (ratio)")
    for fitted in [*models, "all"] if len(models) > 1 else models:
        on = models if fitted == "all" else [fitted]
        out = args.folder / f"calibration-{fitted}.json"
        files = [arg for m in on for arg in ("--plan", str(args.folder / m / "plan.json"), "--graph",
                                             str(args.folder / m / "graph.json"), "--topology",
                                             str(args.folder / m / "topology.json"))]
        done = placer("calibrate", *(str(args.folder / m / "run.json") for m in on), *files, "-o", str(out))
        print("\n".join(f"  | {line}" for line in (done.stdout + done.stderr).strip().splitlines()))
        if done.returncode:
            continue
        for model in models:
            before = simulated_iteration_s(args.folder / model, None)
            after = simulated_iteration_s(args.folder / model, out)
            role = "fitted" if model in on else "held out"
            print(f"  {fitted:<10} {model:<9} {measured[model] * 1e3:8.2f} ms  {before * 1e3:8.2f} ms "
                  f"({measured[model] / before:5.2f})   {after * 1e3:8.2f} ms ({measured[model] / after:5.2f})  {role}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
