"""``placer calibrate``: fit the cost model to launcher run records (docs/cost-model.md "Calibration")."""

from __future__ import annotations

import argparse
from typing import Any

from cli._output import EXIT_OK, format_table, print_json
from cli._parsers import Commands, command
from cli._remote import add_server_options, make_client
from cli.calibrations import report_upload, upload_and_attach
from solvers.calibration import fit_calibration
from solvers.model.canonical import digest
from solvers.model.documents import load_graph, load_plan, load_topology, read_json, write_json
from solvers.model.errors import InvalidInput
from solvers.model.run import RunRecord, run_from_document


def register(sub: Commands[argparse.ArgumentParser]) -> None:
    """``placer calibrate``."""
    p = command(sub, "calibrate", "fit the cost model to launcher runs (placer.calibration/v1)",
                ["placer calibrate run1.json run2.json --plan p1.json --plan p2.json --graph g.json --topology t.json "
                 "-o calibration.json",
                 "placer solve --graph g.json --topology t.json --calibration calibration.json -o plan.json"],
                description="Fits per device kind a compute scale per op class and a per-op launch overhead, "
                            "per channel class (same host, across hosts) the latency and bandwidth inside a "
                            "step, the collective efficiency and the per-stage memory overhead to the runs' "
                            "measured stage times, transfers, iteration times and peak memory, by bounded "
                            "least squares (docs/cost-model.md). Each run finds its plan, graph and topology "
                            "among the files given by their digests (the run's plan_digest, graph_digest and "
                            "topology_digest); a run whose digest matches none is refused naming the field "
                            "(exit code 2). Prints the median and largest relative error per kind of figure "
                            "before and after the fit; `solve`, `simulate` and `solve --solver auto` take the "
                            "result as --calibration.")
    p.add_argument("runs", nargs="+", metavar="RUN", help="run.json files of the launcher (placer.run/v1)")
    p.add_argument("--plan", action="append", required=True, metavar="FILE",
                   help="a plan file the runs ran (repeat for several plans)")
    p.add_argument("--graph", action="append", required=True, metavar="FILE",
                   help="a graph file of the plans (repeat for several graphs)")
    p.add_argument("--topology", action="append", required=True, metavar="FILE",
                   help="a topology file of the plans (repeat for several topologies)")
    p.add_argument("--loss", choices=("soft_l1", "linear", "huber", "cauchy", "arctan"), default="soft_l1",
                   help="the least-squares loss (default: soft_l1, robust to a few outliers)")
    p.add_argument("--name", default="", help="a name stored in the document")
    p.add_argument("-o", "--output", required=True, help="the calibration file to write (placer.calibration/v1)")
    p.add_argument("--json", action="store_true", help="print the calibration document as JSON")
    p.add_argument("--upload", action="store_true",
                   help="upload the calibration to the server too (--url, --api-key; `placer calibrations upload`)")
    p.add_argument("--attach", metavar="TOPOLOGY_ID",
                   help="with --upload: attach it to this topology on the server (its jobs simulate with it)")
    add_server_options(p)
    p.set_defaults(func=cmd_calibrate)


def _pick(run_path: str, field: str, want: str | None, docs: dict[str, Any], flag: str) -> Any:
    if want is None:
        if len(docs) == 1:
            return next(iter(docs.values()))
        raise InvalidInput(f"{run_path}: {field} is null and {len(docs)} {flag} files are given; give the one it ran",
                           field=field)
    if want not in docs:
        raise InvalidInput(f"{run_path}: {field} {want} matches none of the {flag} files", field=field, ref=want)
    return docs[want]


def cmd_calibrate(args: argparse.Namespace) -> int:
    if args.attach and not args.upload:
        raise InvalidInput("--attach: attaching to a topology on the server needs --upload", field="attach")
    plans = {digest(p.to_document()): p for p in map(load_plan, args.plan)}
    graphs = {g.digest: g for g in map(load_graph, args.graph)}
    topologies = {t.digest: t for t in map(load_topology, args.topology)}
    runs: list[RunRecord] = []
    chosen: list[tuple[Any, Any, Any]] = []
    for path in args.runs:
        try:
            run = run_from_document(read_json(path))
        except InvalidInput as exc:
            raise InvalidInput(f"{path}: {exc}", field=exc.field) from None
        chosen.append((_pick(path, "plan_digest", run.plan_digest, plans, "--plan"),
                       _pick(path, "graph_digest", run.graph_digest, graphs, "--graph"),
                       _pick(path, "topology_digest", run.topology_digest, topologies, "--topology")))
        runs.append(run)
    cal = fit_calibration(runs, [c[1] for c in chosen], [c[2] for c in chosen], [c[0] for c in chosen],
                          loss=args.loss, name=args.name)
    write_json(cal.to_document(), args.output)
    uploaded = None
    if args.upload:
        with make_client(args) as c:
            uploaded = upload_and_attach(c, cal.to_document(), args.attach)
    if args.json:
        print_json(cal.to_document())
        return EXIT_OK
    rows = []
    for what, sides in cal.fit["residuals"].items():
        before, after = sides.get("uncalibrated"), sides.get("calibrated")
        rows.append((what, (after or before or {}).get("count", 0), _pct(before, "median_relative"),
                     _pct(after, "median_relative"), _pct(after, "max_relative")))
    print(format_table(["figure", "count", "median error before", "median error after", "largest after"], rows))
    print(f"fitted: {', '.join(cal.fit['parameters']) or 'nothing'}")
    if cal.fit.get("at_bounds"):
        print(f"  warning: at a bound of the fit: {', '.join(cal.fit['at_bounds'])}: the runs do not decide them, or "
              "they measure what the model lacks (noise of a loaded machine); add runs that differ there")
    if cal.fit.get("unidentified"):
        print(f"  warning: not determined by these runs: {', '.join(cal.fit['unidentified'])}: held at neutral values "
              "(an overhead or latency at 0, an op-class scale at its kind's others, an efficiency at 1, a step "
              "overhead at 0); add runs that tell them apart (other stage sizes, op mixes, transfer sizes)")
    print(f"wrote {args.output} ({cal.digest})")
    if uploaded is not None:
        report_upload(*uploaded, as_json=False)
    return EXIT_OK


def _pct(summary: Any, key: str) -> str:
    return "-" if not summary else f"{100 * summary[key]:.1f} %"
