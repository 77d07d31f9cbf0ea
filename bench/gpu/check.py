"""The GPU check: CUDA profiling, a bundle on every GPU at hand, measured against simulated (docs/benchmarks.md).

``python3 bench/gpu/check.py --out DIR`` on a machine with CUDA (``bench/gpu/run.sh`` prepares the
environment of a machine that has PyTorch but not Placer's other packages). For each of two GPT-2
sizes (``small``: 4 layers of 256, the launch-bound case; ``medium``: 8 layers of 1024, sequence
256, where the matrix products dominate):

1. ``placer profile --device cuda`` (micro-batch of 8): op times and allocator peaks measured on the
   GPU; ``placer extract --device-kind H100`` beside it, the roofline estimate of the same graph;
2. ``placer topology measure`` under torchrun, one process per GPU (NCCL where there are two or
   more): the device's kind, speed and memory, and the links between GPUs;
3. ``placer solve --solver even`` over every GPU (one stage per GPU), 4 micro-batches, 1F1B;
4. ``placer launcher build`` and the bundle under torchrun (20 iterations, 5 left out, 3 profiled
   with torch.profiler into ``run.json``);
5. prints measured against simulated: iteration time, per-stage forward time, peak memory.

``--autocast none`` runs the bundle in float32, the precision ``placer profile`` measures in (the
default, ``auto``, runs bf16 autocast on a GPU with bf16): what separates the memory model's error
from autocast's weight cache and saved casts.

Every file a step wrote is copied to ``$OUT/<model>/`` (``--keep``), so that ``bench/gpu/fit.py``
fits a calibration on one model's run and predicts the other's, and compares roofline with profiled
op times per op class — on the GPU machine where it has scipy, else here on the returned files.

``--device cpu`` runs the same steps on two CPU processes (gloo), to check the script where there
is no GPU (about 5 minutes on two cores with ``--models small``); its figures are not the GPU's.
Every step prints what it ran and how long it took; the whole check stays under 8 minutes on one
H100 (its budget: a lent GPU machine has 15 minutes in all, start included).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = {
    "small": ["--example", "gpt2", "--param", "layers=4", "hidden=256", "heads=4", "seq=128", "vocab=4096", "dropout=0"],
    "medium": ["--example", "gpt2", "--param", "layers=8", "hidden=1024", "heads=16", "seq=256", "vocab=8192",
               "dropout=0"],
}
KEPT = ("graph.json", "roofline.json", "topology.json", "plan.json", "bundle/run.json", "bundle/metrics.json")


def step(title: str, argv: list[str], cwd: Path, timeout_s: float, lines: int = 6) -> str:
    """Run one command, print its title, wall time and last ``lines`` lines (0: all); raise on failure."""
    started = time.perf_counter()
    print(f"## {title}\n$ {' '.join(argv)}", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
           "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    wall_s = time.perf_counter() - started
    tail = (done.stdout + done.stderr).strip().splitlines()[-lines:]
    print("\n".join(f"  {line}" for line in tail), flush=True)
    print(f"  ({wall_s:.1f} s, exit {done.returncode})", flush=True)
    if done.returncode:
        raise SystemExit(f"{title} failed (exit {done.returncode})")
    return done.stdout


def placer(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli", *args]


def torchrun(nproc: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *args]


def environment(device: str) -> int:
    """Print versions and devices; the number of processes (GPUs, or 2 on CPU)."""
    import torch

    print(f"python {platform.python_version()}, torch {torch.__version__}, host {platform.node()}", flush=True)
    if device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("CUDA is not available: run with --device cpu to check the steps without a GPU")
        n = torch.cuda.device_count()
        for i in range(n):
            p = torch.cuda.get_device_properties(i)
            print(f"cuda:{i} {p.name}, {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} SMs", flush=True)
        return n
    return 2


def compare(plan: Path, metrics: Path, topo: Path) -> list[str]:
    """Measured against simulated, one line per figure (the launcher's metrics.json, docs/launcher.md).

    The simulated peak counts the device's ``base_memory_bytes`` (on CUDA the context and NCCL's
    buffers, which ``max_memory_allocated`` does not see): the line gives the tensors' part beside it,
    the figure to set against the allocator's peak.
    """
    simulated = json.loads(plan.read_text())["metrics"]
    measured = json.loads(metrics.read_text())
    base = {d["id"]: float(d.get("base_memory_bytes", 0.0)) for d in json.loads(topo.read_text())["devices"]}
    lines = [f"iteration: measured {measured['iteration_s'] * 1e3:.2f} ms (median after warm-up), simulated "
             f"{simulated['iteration_s'] * 1e3:.2f} ms, ratio {measured['iteration_s'] / simulated['iteration_s']:.2f}"]
    peaks = simulated.get("peak_memory_bytes") or {}
    for rank in measured.get("ranks", []):
        device, peak, start = rank["device"], rank.get("peak_memory_bytes"), rank.get("start_memory_bytes")
        line = f"rank {rank['rank']} ({device}, stage {rank.get('stage')}): forward {rank['fwd_s_per_iteration'] * 1e3:.2f} ms"
        if peak is not None:
            line += f", peak memory {peak / 2**20:.1f} MiB"
            if start is not None:
                line += f" ({(peak - start) / 2**20:.1f} MiB above the process's start)"
        if device in peaks:
            line += f", simulated {peaks[device] / 2**20:.1f} MiB"
            if base.get(device):
                line += (f" ({(peaks[device] - base[device]) / 2**20:.1f} MiB of tensors beside "
                         f"{base[device] / 2**20:.1f} MiB of the process's base)")
        lines.append(line)
    return lines


def check_model(name: str, args: argparse.Namespace, out: Path, nproc: int, topo: Path) -> None:
    """Steps 1 and 3-5 for one model, in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    graph, roofline, plan, bundle = out / "graph.json", out / "roofline.json", out / "plan.json", out / "bundle"
    model = MODELS[name]
    profile = ["profile", *model, "--batch", "8", "--device", args.device, "--repeats", "10", "-o", str(graph)]
    step(f"{name}: profile", placer(*profile, *(["--threads", "1"] if args.device == "cpu" else [])), out, 240)
    kind = "H100" if args.device == "cuda" else "cpu"
    step(f"{name}: roofline", placer("extract", *model, "--batch", "8", "--device-kind", kind, "-o", str(roofline)),
         out, 120)
    step(f"{name}: solve", placer("solve", "--solver", "even", "--graph", str(graph), "--topology", str(topo),
                                  "--stages", str(nproc), "--micro-batches", "4", "--schedule", "1f1b", "--quiet",
                                  "-o", str(plan)), out, 60)
    step(f"{name}: bundle", placer("launcher", "build", "--plan", str(plan), "--graph", str(graph), "--topology",
                                   str(topo), "-o", str(bundle)), out, 60)
    step(f"{name}: run", torchrun(nproc, "launch.py", "--steps", str(args.steps), "--warmup", str(args.warmup),
                                  "--profile-steps", str(args.profile_steps), "--autocast", args.autocast), bundle, 300)
    step(f"{name}: simulate --compare", placer("simulate", "--graph", str(graph), "--topology", str(topo), "--plan",
                                               str(plan), "--compare", str(bundle / "run.json")), out, 60)
    print(f"## {name}: measured against simulated")
    for line in compare(plan, bundle / "metrics.json", topo):
        print(f"  {line}")


def keep(work: Path, dest: Path, names: list[str]) -> None:
    """Copy what the steps wrote (:data:`KEPT`, per model) to ``dest``, the folder that comes back."""
    for name in names:
        for rel in KEPT:
            src = (work / name / rel) if rel != "topology.json" else work / rel
            if src.exists():
                (dest / name).mkdir(parents=True, exist_ok=True)
                shutil.copy(src, dest / name / Path(rel).name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/placer-gpu"))
    parser.add_argument("--keep", type=Path, default=None,
                        help="copy each model's graphs, plan, topology, run.json and metrics.json here")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--models", default="small,medium", help=f"comma-separated, of {', '.join(MODELS)}")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--autocast", choices=("auto", "bf16", "none"), default="auto",
                        help="the bundle's --autocast: none runs float32, as the profile measured (default: auto)")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)} (known: {', '.join(MODELS)})")
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    nproc = environment(args.device)
    topo = out / "topology.json"
    step("topology", torchrun(nproc, "-m", "cli", "topology", "measure", "-o", str(topo), "--max-bytes",
                              str(64 * 2**20)), out, 180)
    try:
        for name in names:
            check_model(name, args, out / name, nproc, topo)
    finally:
        if args.keep is not None:
            keep(out, args.keep.resolve(), names)
    if args.keep is not None and len(names) > 1:
        try:
            import scipy  # noqa: F401
        except ImportError:
            print(f"## fit: no scipy here; on the returned files run python -m bench.gpu.fit {args.keep}", flush=True)
        else:
            step("fit", [sys.executable, "-m", "bench.gpu.fit", str(args.keep.resolve())], out, 180, lines=0)
    print(f"## done in {time.perf_counter() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
