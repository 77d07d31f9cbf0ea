"""Tensor parallelism against published configurations (docs/benchmarks.md, "Tensor parallelism: published configurations").

``.venv/bin/python -m bench.bench_tensor_parallel [--cases gpt-1.7b llama3-8b hetero] [--solvers exact] [--time-limit S]
[--max-tp 1 8]``

``--max-tp`` picks the ``max_tp`` solves to run (default both, 1 then 8): ``--max-tp 8`` runs only the
solves with tensor parallelism, and its no-tp / Placer ratio is then not computed (printed ``n/a``).

Per case, three plans scored by Placer's simulator with the same global batch: the published
tensor/pipeline/data configuration built directly as a plan (``p`` stages of the source's layers,
devices replica-major, each replica's tensor-parallel group inside one host), and each solver's
plan with ``max_tp`` 1 (no tensor parallelism) and ``max_tp`` 8 (degrees 1, 2, 4, 8 within a
host). Reported: the time per sample, whether the plan fits memory (the simulator refuses one
that does not, naming the stage), the solve time (wall clock, and the process's CPU time), the
plan's shape and schedule, and the ratios published / Placer.

Sources and figures:

- GPT rows: Narayanan et al., *Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM*, SC'21, Table 1 (the first four rows; figures as commonly cited, the paper
  is not in the project's library): parameters, attention heads, hidden, layers, t, p, GPUs,
  batch size; d = GPUs / (t p). Sequence 2048 and vocabulary 51200 as in the paper's §5. The
  table gives no micro-batch size: the published plan runs micro-batches of 1 sample per replica
  (``global_batch / d`` micro-batches an iteration); the solvers get the counts of the published
  variants of the case (Llama-3 8B: 16 and 32).
- DGX A100 hosts: 8 A100 80 GB (312 TFLOP/s bf16), NVLink 3 at 300 GB/s per direction between
  GPUs of a host (NVSwitch), 8 HDR InfiniBand adapters of 200 Gb/s per host, i.e. 25 GB/s per GPU
  between hosts (NVIDIA DGX A100 datasheet; the paper's §5 testbed).
- Llama-3 8B: 32 layers, hidden 4096, 32 heads, sequence 8192, vocabulary 128256 (Meta's model
  card). The generator builds a GPT block (two-matrix MLP, full multi-head attention): the MLP
  width is 5 x 4096 = 20480 (the FLOPs of SwiGLU's three 4096 x 14336 matrices are those of a
  two-matrix MLP of width 21504) and the 8 key/value heads of grouped-query attention are not
  modelled (the QKV projection counts 32). Published configuration: NeMo's ``llama3_8b``
  pre-training recipe (TP 1, PP 1, context parallelism 2, micro-batch 1, global batch 512; context
  parallelism is not modelled, so it is scored as TP 1 and TP 2, the latter spending CP's two
  ranks on tensor parallelism). 4 hosts of 8 H100 80 GB: NVLink 4 at 450 GB/s per direction, 400
  Gb/s (50 GB/s) per GPU between hosts.
- Heterogeneous: 2 hosts of 8 H100 and 2 of 8 A100 (the fabrics above, 25 GB/s between hosts),
  the 1.7B GPT at the global batch 256: the Megatron-style homogeneous plan (one stage, ``t`` 1,
  32 replicas over both kinds, so the A100s set the pace) against Placer's mapping.
- Mist rows (Zhu et al., *Mist: Efficient Distributed Training of Large Language Models via
  Memory-Parallelism Co-Optimization*, EuroSys'25, arXiv 2503.19050): the authors' tuned best
  configurations in their artifact, github.com/Dazz993/Mist, commit 3895557 (unchanged at
  d69e530), ``benchmark/mist/tuned_configs/a100-40gb/gpt/{7b-s_4096-v_50304-b_128-n_1-m_8,
  13b-s_4096-v_50304-b_256-n_2-m_8, 22b-s_4096-v_50304-b_512-n_4-m_8}-f_False.yaml`` (``f_False``:
  no flash attention, as the generator materialises the attention scores). From each file: hidden,
  layers, heads, MLP 4 h (``model``), sequence 4096, vocabulary 50304, global batch (``training``),
  hosts of 8 GPUs with 40 GB (``hardware``); ``strategy``: ``layer_partitions`` (layers per stage),
  ``device_assignment`` (every stage on 4 GPUs of one host, stages in device order),
  ``stage_strategies`` (micro-batch 1 sample a replica, data-parallel degree, tensor-parallel degree,
  weight / gradient / optimizer sharding flags, offloading ratios all 0),
  ``gradient_checkpointing`` (layers recomputed per stage), ``gradient_accumulation_steps`` (the
  micro-batches of an iteration): 7B on 8 GPUs: 15 / 17 layers, ``t`` 2, ``d`` 2, 7 / 2 layers
  recomputed, 64 micro-batches; 13B on 16: 9 / 10 / 10 / 11 layers, ``t`` 2, ``d`` 2, 6 / 6 / 3 / 0
  recomputed, 128; 22B on 32: 8 stages of 6 layers, ``t`` 1, ``d`` 4, 6 / 6 / 6 / 6 / 6 / 6 / 4 / 3
  recomputed, 128. Not modelled by Placer, so not scored: the optimizer-state sharding over the
  replicas (ZeRO-1) of every stage, the weight and gradient sharding of the 22B's 7th stage and the
  gradient sharding of its 8th (Placer charges every replica the whole gradient and optimizer state,
  ``optimizer_bytes_per_param_byte`` 3), recomputation of some layers of a stage (scored as none,
  all, and exactly the stages with any recomputed layer, :func:`published_recompute`), Mist's
  overlap of communication with compute. Cluster: A100 SXM4 40 GB (the files: ``nvlink: true``,
  ``memory_capacity: 40``), NVLink 3 at 300 GB/s per direction (datasheet); between hosts 100 Gb/s
  a host (12.5 GB/s, 1.5625 GB/s per GPU), an assumption: the paper's testbed description is not in
  the project's library, and the files' profiled inter-host parameters (``gpu_gpu_comm_params``
  1.30, 2.60, 5.42, 10.70 for growing groups) agree with about 10.7 GB/s a host if read as GB/s.
  The files give no measured time, so there is no source time per sample.
- Not scored, no concrete configuration found: Aceso (Liu et al., EuroSys'24): its artifact
  (github.com/MachineLearningSystem/24Eurosys-Aceso, a copy of the authors' artifact, commit
  53d0036) ships profiled op times and throughputs normalised to Megatron-LM
  (``results/ref/e2e_norm_thpt_large_gpt.csv``: 1.00 to 1.31 for GPT 350M to 13B on up to 4 x 8
  V100 32 GB) but no searched configuration (the search writes them when run), and the paper's
  §5.4 case study (GPT-3 1.3B) is not in the library. Metis (Um et al., USENIX ATC'24): the
  planner's repository (github.com/SamsungLabs/Metis, commit 4b24046) ships one sample run,
  ``results/hetero_cost_model``, on its sample profiles (``profile_data_samples``, A100 only; no T4
  profile) whose model cannot be pinned down (its arguments say hidden 4096, sequence 1024, 10
  layers; the profiles' 202,383,360 parameter bytes per layer fit hidden 2048 in fp32); its best plan
  (one host of 4 T4 and three of 4 A100; two stages of 8 GPUs, the first spanning the T4 host and
  an A100 host, ``(dp, tp)`` (4, 2) each, layers 0-3 / 4-9, "8 batches") is an example of the tool,
  not a configuration the paper reports.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import time
from collections.abc import Sequence

import numpy as np

from bench.bench_tp_search import with_megatron_names
from solvers import generate_graph, generate_topology, simulate, solve
from solvers.generate._topo import matrix_topology, two_level
from solvers.generate.devices import GB, GiB, relative_speed
from solvers.model.errors import PlacerError
from solvers.model.graph import OpGraph
from solvers.model.plan import Plan, Stage
from solvers.model.problem import Problem, ProblemSettings
from solvers.model.topology import Device, Topology
from solvers.partition.tp import tp_groups

# NVLink inside a host and the per-GPU network between hosts, GB/s: DGX H100 (NVLink 4, 400 Gb/s
# per GPU) and DGX A100 (NVLink 3, 8 x HDR 200 Gb/s per host)
HOST_LINKS_GBPS = {"H100": (450.0, 50.0), "A100": (300.0, 25.0)}


@dataclasses.dataclass(frozen=True)
class Case:
    """One row: the model, the cluster and the published (t, p, d) with its global batch."""

    name: str
    heads: int
    hidden: int
    layers: int
    t: int
    p: int
    gpus: int
    global_batch: int
    seq_len: int = 2048
    vocab: int = 51200
    ffn_mult: int = 4
    device: str = "A100"
    source: str = "Narayanan et al. SC'21 Table 1"
    also_t: tuple[int, ...] = ()  # further published degrees scored (t d GPUs the same, d = GPUs / (t p))
    achieved_TFLOPs: float | None = None  # per GPU, as the source reports it
    layer_split: tuple[int, ...] = ()  # layers per stage, first to last (empty: layers / p each)
    checkpointed_layers: tuple[int, ...] = ()  # per stage, layers the source recomputes (empty: not stated)
    memory_GiB: float = 80.0  # per GPU
    links_GBps: tuple[float, float] | None = None  # (inside a host, per GPU between hosts); None: HOST_LINKS_GBPS

    def __post_init__(self) -> None:
        if self.layer_split and (len(self.layer_split) != self.p or sum(self.layer_split) != self.layers
                                 or min(self.layer_split) < 1):
            raise ValueError(f"{self.name}: layer_split {list(self.layer_split)} must give each of the {self.p} "
                             f"stages at least one layer and {self.layers} layers in all")
        if self.checkpointed_layers and (len(self.checkpointed_layers) != self.p or any(
                not 0 <= c <= n for c, n in zip(self.checkpointed_layers, self.stage_layer_counts(), strict=True))):
            raise ValueError(f"{self.name}: checkpointed_layers {list(self.checkpointed_layers)} must give each of "
                             f"the {self.p} stages between 0 and its layers {self.stage_layer_counts()}")

    def stage_layer_counts(self) -> list[int]:
        """Layers per stage: ``layer_split``, or ``layers / p`` each with the remainder on the last stage."""
        if self.layer_split:
            return list(self.layer_split)
        per_stage = self.layers // self.p
        return [per_stage] * (self.p - 1) + [self.layers - per_stage * (self.p - 1)]

    def recomputed_stages(self) -> tuple[int, ...]:
        """Stages in which the source recomputes at least one layer (Placer recomputes a stage whole or not)."""
        return tuple(s for s, c in enumerate(self.checkpointed_layers) if c > 0)

    @property
    def d(self) -> int:
        return self.gpus // (self.t * self.p)

    def measured_ms_per_sample(self) -> float | None:
        """The source's own time per sample: its FLOPs per sample (Narayanan et al. SC'21 §5.1,
        ``96 s l h^2 (1 + s / 6h + V / 16lh)``, activation recomputation counted) over the achieved
        FLOP/s of all its GPUs."""
        if self.achieved_TFLOPs is None:
            return None
        s, lay, h, v = self.seq_len, self.layers, self.hidden, self.vocab
        flops = 96 * s * lay * h**2 * (1 + s / (6 * h) + v / (16 * lay * h))
        return 1e3 * flops / (self.achieved_TFLOPs * 1e12 * self.gpus)


TABLE1 = {  # Narayanan et al., SC'21, Table 1, rows 1-4
    "gpt-1.7b": Case("gpt-1.7b", 24, 2304, 24, 1, 1, 32, 512, achieved_TFLOPs=137.0),
    "gpt-3.6b": Case("gpt-3.6b", 32, 3072, 30, 2, 1, 64, 512, achieved_TFLOPs=138.0),
    "gpt-7.5b": Case("gpt-7.5b", 32, 4096, 36, 4, 1, 128, 512, achieved_TFLOPs=142.0),
    "gpt-18b": Case("gpt-18b", 48, 6144, 40, 8, 1, 256, 1024, achieved_TFLOPs=135.0),
}
LLAMA = Case(
    "llama3-8b",
    32,
    4096,
    32,
    1,
    1,
    32,
    512,
    seq_len=8192,
    vocab=128256,
    ffn_mult=5,
    device="H100",
    source="NeMo llama3_8b recipe, CP 2 not modelled",
    also_t=(2,),
)
HETERO = Case(
    "hetero-1.7b", 24, 2304, 24, 1, 1, 32, 256, device="H100", source="Megatron-style homogeneous: t 1, p 1, d 32"
)
# Mist's tuned A100 40 GB configurations (Dazz993/Mist, benchmark/mist/tuned_configs/a100-40gb/gpt/,
# files *-f_False.yaml, commit d69e530): hosts of 8 A100 SXM4 40 GB, NVLink 3 at 300 GB/s, 100 Gb/s
# (12.5 GB/s, 1.5625 GB/s per GPU) between hosts; sequence 4096, vocabulary 50304, MLP 4h.
MIST_LINKS_GBPS = (300.0, 12.5 / 8)
MIST = {
    "mist-7b": Case(
        "mist-7b", 32, 4096, 32, 2, 2, 8, 128, seq_len=4096, vocab=50304, source="Mist tuned config 7b",
        layer_split=(15, 17), checkpointed_layers=(7, 2), memory_GiB=40.0, links_GBps=MIST_LINKS_GBPS,
    ),
    "mist-13b": Case(
        "mist-13b", 40, 5120, 40, 2, 4, 16, 256, seq_len=4096, vocab=50304, source="Mist tuned config 13b",
        layer_split=(9, 10, 10, 11), checkpointed_layers=(6, 6, 3, 0), memory_GiB=40.0, links_GBps=MIST_LINKS_GBPS,
    ),
    "mist-22b": Case(
        "mist-22b", 64, 6144, 48, 1, 8, 32, 512, seq_len=4096, vocab=50304, source="Mist tuned config 22b",
        layer_split=(6,) * 8, checkpointed_layers=(6, 6, 6, 6, 6, 6, 4, 3), memory_GiB=40.0,
        links_GBps=MIST_LINKS_GBPS,
    ),
}


def megatron_gpt(case: Case) -> OpGraph:
    """The case's GPT at op granularity, 1 sample a micro-batch, its linears under Megatron's module names."""
    graph = generate_graph(
        "transformer",
        layers=case.layers,
        causal=True,
        hidden=case.hidden,
        heads=case.heads,
        seq_len=case.seq_len,
        micro_batch=1,
        vocab=case.vocab,
        ffn_mult=case.ffn_mult,
        device=case.device,
    )
    return with_megatron_names(graph, case.name)


def hosts_topology(
    name: str, kinds: Sequence[str], reference: str, nvlink_GBps: Sequence[float], inter_GBps: float
) -> Topology:
    """Hosts of 8 GPUs of ``kinds[k]`` (speed relative to ``reference``, datasheet memory), NVLink
    ``nvlink_GBps[k]`` inside host ``k``, ``inter_GBps`` per GPU pair across hosts."""
    host = np.repeat(np.arange(len(kinds)), 8)
    devices = [
        Device(f"gpu{i}", kinds[h], f"node{h}", 80.0 * GiB, relative_speed(kinds[h], reference))
        for i, h in enumerate(host.tolist())
    ]
    bw = two_level(host, 0.0, inter_GBps * GB)
    for k, nvlink in enumerate(nvlink_GBps):
        inside = np.ix_(host == k, host == k)
        bw[inside] = nvlink * GB
    np.fill_diagonal(bw, 0.0)
    lat = two_level(host, 2e-6, 5e-6)
    return matrix_topology(name, devices, bw, lat, {"generator": "bench_tensor_parallel"})


def topology_for(case: Case) -> Topology:
    if case is HETERO:
        return hosts_topology(
            "2xH100+2xA100", ["H100", "H100", "A100", "A100"], "H100", [450.0, 450.0, 300.0, 300.0], 25.0
        )
    intra_GBps, inter_GBps = case.links_GBps or HOST_LINKS_GBPS[case.device]
    return generate_topology(
        "hierarchical",
        nodes=case.gpus // 8,
        gpus_per_node=8,
        device=case.device,
        memory_gib=case.memory_GiB,
        intra_bandwidth_GBps=intra_GBps,
        inter_bandwidth_GBps=inter_GBps,
        intra_latency_s=2e-6,
        inter_latency_s=5e-6,
    )


def _layer_index(op_layer: str) -> int | None:
    match = re.search(r"\.h\.(\d+)(\.|$)", op_layer)
    return int(match.group(1)) if match else None


def published_plan(case: Case, graph: OpGraph, topo: Topology, micro_batches: int) -> Plan:
    """The published (t, p, d): ``p`` stages of :meth:`Case.stage_layer_counts` layers (embedding with
    the first, the final norm and head with the last), stage ``s`` on groups ``s d .. (s+1) d - 1`` of
    ``t`` devices of one host, replica-major (replica ``k``'s group is ``devices[k t:(k+1) t]``)."""
    groups = tp_groups(topo, case.t)
    if len(groups) < case.p * case.d:
        raise ValueError(f"{case.name}: {len(groups)} groups of {case.t} devices, {case.p * case.d} needed")
    stage_of_layer = np.repeat(np.arange(case.p), case.stage_layer_counts())
    stage_ops: list[list[str]] = [[] for _ in range(case.p)]
    for node in graph.nodes:
        index = _layer_index(node.id)
        if index is None:
            stage = 0 if node.id.startswith("transformer.w") or node.id.startswith("transformer.add") else case.p - 1
        elif index >= case.layers:
            raise ValueError(f"{case.name}: op {node.id} is in layer {index}, the case has {case.layers} layers")
        else:
            stage = int(stage_of_layer[index])
        stage_ops[stage].append(node.id)
    stages = []
    for s in range(case.p):
        devices = [topo.devices[i].id for g in groups[s * case.d : (s + 1) * case.d] for i in g]
        stages.append(Stage(ops=tuple(stage_ops[s]), devices=tuple(devices), tp=case.t))
    return Plan(stages=tuple(stages), micro_batches=micro_batches, schedule="1f1b", solver="published")


def published_recompute(case: Case) -> list[bool | tuple[int, ...]]:
    """The recomputation settings a published plan is scored with: none and every stage (Megatron-LM
    runs both), and, where the source recomputes some layers of some stages only, exactly the stages
    with any recomputed layer (Placer recomputes a stage whole or not at all)."""
    settings: list[bool | tuple[int, ...]] = [False, True]
    some = case.recomputed_stages()
    if some and len(some) < case.p:
        settings.append(some)
    return settings


def _score(problem: Problem, plan: Plan, global_batch: int) -> tuple[float, str]:
    """(ms per sample, '') or (nan, why the simulator refused it)."""
    try:
        metrics = simulate(problem, plan).metrics
    except PlacerError as exc:
        return float("nan"), str(exc)[:160]
    return 1e3 * metrics["iteration_s"] / global_batch, ""


def _shape(plan: Plan) -> str:
    shapes = sorted({(len(s.devices) // s.tp, s.tp) for s in plan.stages})
    return f"{len(plan.stages)} stages, (R, t) {shapes}, {plan.schedule} v={plan.virtual_stages}"


def _stage_degrees(plan: Plan) -> str:
    """Each stage's replicas and tensor-parallel degree, first to last (``R x t``)."""
    return "[" + ", ".join(f"{len(s.devices) // s.tp}x{s.tp}" for s in plan.stages) + "]"


def run_case(case: Case, solvers: Sequence[str], time_limit_s: float, max_tps: Sequence[int] = (1, 8)) -> None:
    graph = megatron_gpt(case)
    topo = topology_for(case)
    variants = [dataclasses.replace(case, t=t) for t in (case.t, *case.also_t)]
    counts = tuple(sorted({case.global_batch // v.d for v in variants}))  # micro-batches of 1 sample a replica
    measured = case.measured_ms_per_sample()
    if measured is not None:
        print(
            f"{case.name:12} measured by the source: {measured:.3f} ms/sample ({case.achieved_TFLOPs:g} TFLOP/s a GPU)"
        )
    pub_ms = float("inf")
    for variant in variants:
        m = case.global_batch // variant.d
        problem = Problem(graph, topo, settings=ProblemSettings(micro_batches=(m,), global_batch=case.global_batch))
        plan = published_plan(variant, graph, topo, m)
        for recompute in published_recompute(case):
            ms, why = _score(problem, dataclasses.replace(plan, recompute=recompute), case.global_batch)
            pub_ms = min(pub_ms, ms) if not why else pub_ms
            print(
                f"{case.name:12} published t={variant.t} p={case.p} d={variant.d} m={m} recompute={recompute} "
                f"({case.source}): {ms:.3f} ms/sample {'fits' if not why else 'REFUSED: ' + why}  "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    for solver in solvers:
        no_tp_ms = float("nan")
        for max_tp in max_tps:
            problem = Problem(
                graph,
                topo,
                settings=ProblemSettings(micro_batches=counts, global_batch=case.global_batch, max_tp=max_tp),
            )
            started, started_cpu = time.perf_counter(), time.process_time()
            plan = solve(problem, solver, time_limit_s=time_limit_s)
            took, took_cpu = time.perf_counter() - started, time.process_time() - started_cpu
            ms, why = _score(problem, plan, case.global_batch)
            no_tp_ms = ms if max_tp == 1 else no_tp_ms
            no_tp_ratio = f"{no_tp_ms / ms:.3f}" if 1 in max_tps else "n/a"
            print(
                f"{case.name:12} {solver:8} max_tp={max_tp}: {ms:.3f} ms/sample, solve {took:.1f} s (CPU {took_cpu:.1f} s), "
                f"published/placer {pub_ms / ms:.3f}, no-tp/placer {no_tp_ratio}, {_shape(plan)}, "
                f"stages (R x t) {_stage_degrees(plan)}, "
                f"m={plan.micro_batches}, recompute={plan.recompute}, {plan.status} {why}  "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )


def main() -> None:
    cases = {**TABLE1, "llama3-8b": LLAMA, "hetero": HETERO, **MIST}
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["gpt-1.7b", "llama3-8b", "hetero"], choices=sorted(cases))
    parser.add_argument("--solvers", nargs="+", default=["exact"])
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--max-tp", nargs="+", type=int, default=[1, 8], choices=[1, 8],
                        help="the max_tp solves to run, in this order (default: 1 8)")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; limit {args.time_limit:g} s", flush=True)
    for name in args.cases:
        run_case(cases[name], args.solvers, args.time_limit, args.max_tp)


if __name__ == "__main__":
    main()
