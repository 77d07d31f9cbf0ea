"""How a training orchestrator uses Placer: from a model to the commands that start it.

1. extract the model's operator graph (a small BERT, with ``extract``; without torch a
   generated transformer graph stands in), and upload it;
2. upload the cluster's topology (generated here; ``placer topology measure`` measures a real one);
3. compare four solvers on the server and wait for the comparison;
4. take the best plan, download its launcher bundle if the server builds them, and print the
   torchrun command of each node.

Run it against a server (``make run`` starts one)::

    PLACER_URL=http://127.0.0.1:8000 PLACER_API_KEY=plc_... python examples/orchestrator.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from client import Client, LauncherUnavailable
from client.bundles import torchrun_commands
from solvers.generate import generate_graph, generate_topology
from solvers.model.graph import OpGraph
from solvers.model.settings import ProblemSettings

SOLVERS = ("parmesan", "rannc", "pipedream", "even")


def model_graph() -> OpGraph:
    """A 2-layer BERT's op graph with roofline times for H100s, or a generated stand-in without torch."""
    try:
        from extract.build import example_source
        from extract.extract import extract

        source = example_source("bert", {"layers": 2, "hidden": 64, "heads": 2, "intermediate": 128, "seq": 32,
                                         "vocab": 1000}, batch=8)
        return extract(source, device_kind="H100", name="bert-tiny")
    except ImportError:
        print("torch is not installed: using a generated transformer graph", file=sys.stderr)
        return generate_graph("transformer", layers=4)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="default: PLACER_URL")
    parser.add_argument("--api-key", help="default: PLACER_API_KEY")
    parser.add_argument("--solvers", default=",".join(SOLVERS))
    parser.add_argument("--time-limit", type=float, default=20.0, help="seconds per solver")
    parser.add_argument("-o", "--output", default="launcher.zip", help="where to write the launcher bundle")
    args = parser.parse_args(argv)

    with Client(args.url, args.api_key) as placer:
        graph = placer.upload_graph(model_graph())
        topology = placer.upload_topology(generate_topology("hierarchical", nodes=1, gpus_per_node=4))
        print(f"graph {graph.id} ({graph.n_ops} ops), topology {topology.id} ({topology.n_devices} devices)")

        comparison = placer.compare(graph, topology, args.solvers.split(","),
                                    settings=ProblemSettings(micro_batches=(4, 8)), time_limit_s=args.time_limit)
        comparison = placer.wait_comparison(comparison, timeout=10 * args.time_limit)
        for row in comparison.rows:
            figure = f"{row.objective_s * 1e3:.3f} ms" if row.objective_s is not None else "-"
            print(f"  {row.solver:<10} {row.job_status:<10} {row.status or '-':<10} {figure}")
        best = comparison.best
        if best is None or best.plan_id is None:
            print("no solver found a feasible plan")
            return 1
        plan = placer.get_plan(best.plan_id)
        print(f"best: {best.solver}, {len(plan.stages)} stages, {plan.micro_batches} micro-batches, "
              f"{best.throughput_samples_per_s:.4g} samples/s (plan {best.plan_id})")

        try:
            bundle = placer.download_launcher(best.plan_id, Path(args.output))
        except LauncherUnavailable as exc:
            print(f"launcher not available: {exc.detail}")
            return 0
    print(f"launcher bundle: {args.output}; on each node, in the unpacked folder:")
    for command in torchrun_commands(bundle):
        print(f"  {command}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
