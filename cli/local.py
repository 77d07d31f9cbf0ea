"""Local commands: no server needed (validate, import, generate, solve, simulate, solvers)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from cli._output import EXIT_FAILED, EXIT_OK, format_seconds, format_table, print_json
from cli._params import describe_params, parse_params
from solvers.model.errors import InvalidInput

if TYPE_CHECKING:
    from solvers.model.plan import Plan
    from solvers.model.problem import Problem


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    _register_validate(sub)
    _register_import(sub)
    _register_generate(sub)
    _register_solve(sub)
    _register_simulate(sub)
    p = sub.add_parser("solvers", help="list the solver catalogue")
    p.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    p.set_defaults(func=cmd_solvers)


# ---- validate / import ------------------------------------------------------------------
def _register_validate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("validate", help="validate a graph, topology, plan or problem document")
    p.add_argument("file", help="JSON document (gzip allowed)")
    p.add_argument("--graph", help="with a plan: the graph to check it against")
    p.add_argument("--topology", help="with a plan: the topology to check it against")
    p.add_argument("--objective", choices=("throughput", "latency"), help="with a plan: override its objective")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    from solvers.model.documents import parse_document, read_json
    from solvers.model.graph import OpGraph
    from solvers.model.plan import Plan
    from solvers.model.topology import Topology
    from solvers.validity import resolve_plan

    obj = parse_document(read_json(args.file))
    info: dict[str, Any] = {"ok": True, "file": args.file}
    if isinstance(obj, OpGraph):
        info.update(format="placer.opgraph/v1", name=obj.name, nodes=obj.n_ops, edges=len(obj.edges), digest=obj.digest)
    elif isinstance(obj, Topology):
        info.update(format="placer.topology/v1", name=obj.name, devices=obj.n_devices, hosts=len(obj.hosts),
                    digest=obj.digest)
    elif isinstance(obj, Plan):
        info.update(format="placer.plan/v1", stages=len(obj.stages), status=obj.status)
        if args.graph or args.topology:
            problem = _problem(args, obj)
            resolve_plan(problem, obj)
            info["checked_against"] = {"graph": problem.graph.digest, "topology": problem.topology.digest}
    else:
        info.update(format="placer.problem/v1")
    if args.json:
        print_json(info)
    else:
        details = ", ".join(f"{k}={v}" for k, v in info.items() if k not in ("ok", "file"))
        print(f"ok: {args.file}: {details}")
    return EXIT_OK


def _register_import(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("import", help="convert another tool's profile (or a GraphML file) into a placer document")
    p.add_argument("--from", dest="source", choices=("pipedream", "piper", "graphml"), required=True)
    p.add_argument("file")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--name", help="graph name (default: the file's folder or stem; GraphML: its own name)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_import)


def cmd_import(args: argparse.Namespace) -> int:
    from solvers.model.documents import read_json, write_json

    path = Path(args.file)
    if args.source == "graphml":
        return _import_graphml(args)
    name = args.name or (path.parent.name if path.name == "graph.txt" else path.stem)
    if args.source == "pipedream":
        from solvers.model.importers.pipedream import import_pipedream

        try:
            text = path.read_text()
        except OSError as exc:
            raise InvalidInput(f"{path}: cannot read: {exc.strerror}", field="file") from None
        graph = import_pipedream(text, name)
    else:
        from solvers.model.importers.piper import import_piper

        graph = import_piper(read_json(path), name)
    write_json(graph.to_document(), args.output)
    info = {"output": args.output, "name": graph.name, "nodes": graph.n_ops, "edges": len(graph.edges),
            "digest": graph.digest}
    print_json(info) if args.json else print(f"wrote {args.output}: {graph.n_ops} nodes, {len(graph.edges)} edges")
    return EXIT_OK


def _import_graphml(args: argparse.Namespace) -> int:
    from solvers.model.documents import write_json
    from solvers.model.graph import OpGraph, graph_from_document
    from solvers.model.graphml import read_graphml
    from solvers.model.topology import topology_from_document

    obj = read_graphml(args.file)
    if args.name:
        doc = {**obj.to_document(), "name": args.name}
        obj = graph_from_document(doc) if isinstance(obj, OpGraph) else topology_from_document(doc)
    write_json(obj, args.output)
    if isinstance(obj, OpGraph):
        info = {"output": args.output, "name": obj.name, "nodes": obj.n_ops, "edges": len(obj.edges),
                "digest": obj.digest}
        summary = f"{obj.n_ops} nodes, {len(obj.edges)} edges"
    else:
        info = {"output": args.output, "name": obj.name, "devices": obj.n_devices, "digest": obj.digest}
        summary = f"topology, {obj.n_devices} devices"
    print_json(info) if args.json else print(f"wrote {args.output}: {summary}")
    return EXIT_OK


# ---- generators ---------------------------------------------------------------------------
def _register_generate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for what in ("topology", "graph"):
        group = sub.add_parser(what, help=f"{what} tools").add_subparsers(dest=f"{what}_command", required=True)
        p = group.add_parser("generate", help=f"generate a {what}; `placer {what} generate KIND --help-params`",
                             description="Parameters are given as --name value; see --help-params.")
        p.add_argument("kind")
        p.add_argument("-o", "--output", help="output file (default: stdout)")
        p.add_argument("--help-params", action="store_true", help="list the kind's parameters")
        p.add_argument("--json", action="store_true")
        p.set_defaults(func=cmd_generate, what=what, accepts_params=True)
        p = group.add_parser("graphml", help=f"export a {what} as GraphML (networkx, yEd, Gephi ...)")
        p.add_argument("file", help=f"a placer.{'opgraph' if what == 'graph' else 'topology'}/v1 document")
        p.add_argument("-o", "--output", help="output file (default: stdout)")
        p.set_defaults(func=cmd_graphml, what=what, json=False)
        if what == "graph":
            _register_graph_tools(group)


def _register_graph_tools(group: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = group.add_parser("scale", help="estimate the graph at a large batch size from small-batch profiles "
                                       "(Celeritas Standard Evaluation, per-node linear regression)")
    p.add_argument("--profiles", nargs="+", required=True, help="profiles of the same model (placer.opgraph/v1)")
    p.add_argument("--batch-sizes", nargs="+", type=int,
                   help="the batch size of each profile (default: each profile's profiled_batch_size)")
    p.add_argument("--batch", type=int, required=True, help="the target batch size")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_scale)
    p = group.add_parser("dot", help="export a graph (optionally with a plan's stages) as Graphviz DOT")
    p.add_argument("file")
    p.add_argument("--plan")
    p.add_argument("--topology", help="with --plan: the topology the plan runs on")
    p.add_argument("--objective", choices=("throughput", "latency"))
    p.add_argument("-o", "--output")
    p.set_defaults(func=cmd_dot, json=False)


def cmd_generate(args: argparse.Namespace) -> int:
    from solvers import generate
    from solvers.model.documents import write_json

    kinds = generate.TOPOLOGY_KINDS if args.what == "topology" else generate.GRAPH_KINDS
    func = kinds.get(args.kind.lower())
    if func is None:
        raise InvalidInput(f"unknown {args.what} kind {args.kind!r}; valid kinds: {', '.join(sorted(kinds))}",
                           field="kind", ref=args.kind)
    if args.help_params:
        rows = describe_params(func)
        print(f"{args.what} {args.kind}: {(func.__doc__ or '').strip().splitlines()[0]}")
        print(format_table(["parameter", "type", "default"], [("--" + n.replace("_", "-"), t, d) for n, t, d in rows]))
        return EXIT_OK
    params = parse_params(func, args.params, f"{args.what} {args.kind}")
    obj = (generate.generate_topology if args.what == "topology" else generate.generate_graph)(args.kind, **params)
    doc = obj.to_document()
    if args.output:
        write_json(doc, args.output)
        size = f"{obj.n_devices} devices" if args.what == "topology" else f"{obj.n_ops} ops"  # type: ignore[union-attr]
        if args.json:
            print_json({"output": args.output, "digest": obj.digest, "name": obj.name})
        else:
            print(f"wrote {args.output}: {args.what} {obj.name!r}, {size}")
    else:
        json.dump(doc, sys.stdout)
        sys.stdout.write("\n")
    return EXIT_OK


def cmd_scale(args: argparse.Namespace) -> int:
    from solvers.celeritas.estimate import scale_graph
    from solvers.model.documents import load_graph, write_json

    profiles = [load_graph(path) for path in args.profiles]
    sizes = args.batch_sizes or [g.profiled_batch_size for g in profiles]
    graph = scale_graph(profiles, sizes, args.batch)
    write_json(graph.to_document(), args.output)
    if args.json:
        print_json({"output": args.output, "digest": graph.digest, "profiled_batch_size": graph.profiled_batch_size})
    else:
        print(f"wrote {args.output}: {graph.n_ops} ops at batch size {graph.profiled_batch_size}")
    return EXIT_OK


def cmd_dot(args: argparse.Namespace) -> int:
    from solvers.model.documents import load_graph, load_plan
    from solvers.model.dot import to_dot
    from solvers.validity import resolve_plan

    graph = load_graph(args.file)
    resolved = None
    if args.plan:
        if not args.topology:
            raise InvalidInput("--plan needs --topology", field="topology")
        plan = load_plan(args.plan)
        resolved = resolve_plan(_load_problem(args.file, args.topology, args.objective, {}, plan), plan,
                                check_memory=False)
    text = to_dot(graph, resolved)
    if args.output:
        Path(args.output).write_text(text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_graphml(args: argparse.Namespace) -> int:
    from solvers.model.documents import load_graph, load_topology
    from solvers.model.graphml import to_graphml

    obj = load_graph(args.file) if args.what == "graph" else load_topology(args.file)
    text = to_graphml(obj)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return EXIT_OK


# ---- solve / simulate ----------------------------------------------------------------------
def _add_problem_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--graph", required=True)
    p.add_argument("--topology", required=True)
    p.add_argument("--objective", choices=("throughput", "latency"))
    p.add_argument("--pass", dest="pass_", choices=("forward", "training"))


def _register_solve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("solve", help="solve locally (no server) and write the plan")
    p.add_argument("--solver", required=True)
    _add_problem_args(p)
    p.add_argument("--stages", type=int)
    p.add_argument("--replicas", type=int)
    p.add_argument("--micro-batches", help="a count or a comma-separated list of candidates")
    p.add_argument("--schedule", choices=("1f1b", "gpipe"))
    p.add_argument("--recompute", action="store_true")
    p.add_argument("--settings", help="JSON object of further problem settings")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="solver option (VALUE read as JSON when it parses, else as a string)")
    p.add_argument("--time-limit", type=float)
    p.add_argument("--seed", type=int)
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--json", action="store_true", help="print the plan's metrics as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=cmd_solve)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    settings: dict[str, Any] = json.loads(args.settings) if getattr(args, "settings", None) else {}
    if not isinstance(settings, dict):
        raise InvalidInput("--settings: must be a JSON object", field="settings")
    for key in ("stages", "replicas", "seed", "schedule"):
        if getattr(args, key, None) is not None:
            settings[key] = getattr(args, key)
    if getattr(args, "micro_batches", None):
        try:
            settings["micro_batches"] = [int(x) for x in str(args.micro_batches).split(",")]
        except ValueError:
            raise InvalidInput(f"--micro-batches: not a count or list: {args.micro_batches!r}",
                               field="micro_batches") from None
    if getattr(args, "recompute", False):
        settings["recompute"] = True
    if getattr(args, "pass_", None):
        settings["pass"] = args.pass_
    return settings


def _problem(args: argparse.Namespace, plan: Plan | None = None) -> Problem:
    """The problem named by ``--graph``, ``--topology``, ``--objective`` and the settings flags."""
    return _load_problem(args.graph, args.topology, args.objective, _settings(args), plan)


def _load_problem(graph_path: str | None, topology_path: str | None, objective: str | None,
                  settings: dict[str, Any], plan: Plan | None = None) -> Problem:
    """Load the documents and build the problem; a plan supplies the objective and pass it was made for."""
    from solvers.model.documents import load_graph, load_topology
    from solvers.model.problem import Objective, Problem, settings_from_dict

    if not graph_path or not topology_path:
        raise InvalidInput("--graph and --topology are both needed", field="graph" if not graph_path else "topology")
    graph, topology = load_graph(graph_path), load_topology(topology_path)
    chosen = objective or (plan.objective if plan is not None and plan.objective else "throughput")
    if plan is not None and "pass" not in settings and plan.pass_:
        settings = {**settings, "pass": plan.pass_}
    return Problem(graph, topology, cast(Objective, chosen), settings_from_dict(settings))


def _options(pairs: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise InvalidInput(f"--option {pair!r}: expected KEY=VALUE", field="option")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def cmd_solve(args: argparse.Namespace) -> int:
    from solvers.base import ProgressEvent
    from solvers.model.documents import write_json
    from solvers.solving import solve

    problem = _problem(args)
    show = not args.quiet and sys.stderr.isatty()

    def progress(event: ProgressEvent) -> None:
        if show:
            best = format_seconds(event.incumbent_s)
            sys.stderr.write(f"\r[{'#' * int(20 * event.fraction):<20}] {event.fraction:4.0%} best {best} ")
            sys.stderr.flush()

    plan = solve(problem, args.solver, _options(args.option), time_limit_s=args.time_limit, progress=progress)
    if show:
        sys.stderr.write("\n")
    write_json(plan.to_document(), args.output)
    if args.json:
        print_json({"status": plan.status, "output": args.output, "solve_time_s": plan.solve_time_s,
                    "claimed_objective_s": plan.claimed_objective_s, "metrics": plan.metrics})
    else:
        _print_summary(plan.solver, plan.status, plan.metrics, plan.solve_time_s)
        print(f"wrote {args.output}")
    return EXIT_FAILED if plan.status == "infeasible" else EXIT_OK


def _print_summary(solver: str, status: str, metrics: Any, solve_time_s: float | None) -> None:
    if not metrics:
        print(f"{solver}: {status}")
        return
    print(f"{solver}: {status}; objective {format_seconds(metrics['objective_s'])}, "
          f"throughput {metrics['throughput_samples_per_s']:.4g} samples/s, "
          f"efficiency {metrics['efficiency']:.1%}, solved in {format_seconds(solve_time_s)}")


def _register_simulate(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("simulate", help="score a plan with the simulator")
    _add_problem_args(p)
    p.add_argument("--plan", required=True)
    p.add_argument("--engine", choices=("auto", "stage", "op"), default="auto")
    p.add_argument("--timeline", help="write the timeline (device, task, start, end) as JSON here")
    p.add_argument("--json", action="store_true", help="print the metrics as one JSON object")
    p.add_argument("--compare", metavar="METRICS", help="a launcher run's metrics.json to set beside the prediction")
    p.set_defaults(func=cmd_simulate)


def cmd_simulate(args: argparse.Namespace) -> int:
    from solvers.model.documents import load_plan
    from solvers.simulator import simulate

    plan = load_plan(args.plan)
    problem = _problem(args, plan)
    result = simulate(problem, plan, timeline=bool(args.timeline), engine=args.engine)
    if args.timeline:
        entries = [{"resource": e.resource, "task": e.task, "start_s": e.start_s, "end_s": e.end_s}
                   for e in result.timeline or []]
        Path(args.timeline).write_text(json.dumps(entries))
    m = result.metrics
    if args.compare:
        return _print_comparison(args, problem, plan, m)
    if args.json:
        print_json(m)
        return EXIT_OK
    rows: list[tuple[str, Any]] = [(k, m[k]) for k in ("objective_s", "iteration_s", "latency_s", "throughput_samples_per_s",
                                "bottleneck_stage_s", "bubble_fraction", "lower_bound_s", "efficiency")]
    print(format_table(["metric", "value"], rows))
    return EXIT_OK


def _print_comparison(args: argparse.Namespace, problem: Any, plan: Any, metrics: Any) -> int:
    from launcher.compare import compare
    from solvers.model.documents import read_json

    rows = compare(problem.graph, problem.topology, plan, metrics, read_json(args.compare))
    if args.json:
        print_json({"metrics": metrics, "comparison": [r.to_dict() for r in rows]})
        return EXIT_OK
    print(format_table(["", "measured", "simulated", "measured / simulated"],
                       [(r.what, format_seconds(r.measured_s), format_seconds(r.simulated_s), f"{r.ratio:.3g}")
                        for r in rows]))
    return EXIT_OK


def cmd_solvers(args: argparse.Namespace) -> int:
    from solvers import registry

    cat = registry.catalogue()
    if args.json:
        print_json([c.to_dict() for c in cat])
    else:
        print(format_table(["solver", "objectives", "summary"], [(c.name, ",".join(c.objectives), c.summary) for c in cat]))
    return EXIT_OK
