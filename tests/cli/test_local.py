"""The local CLI contract: validate, graph import, graph and topology generate, solve, simulate, catalogue list."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli import main

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Path]:
    topo, graph = tmp_path / "topo.json", tmp_path / "graph.json"
    assert run(capsys, "topology", "generate", "hierarchical", "--nodes", "2", "--gpus-per-node", "2",
               "-o", str(topo))[0] == 0
    assert run(capsys, "graph", "generate", "transformer", "--layers", "2", "-o", str(graph))[0] == 0
    return {"topo": topo, "graph": graph, "dir": tmp_path}


def test_validate_ok_and_json(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", str(files["graph"]), "--json")
    assert code == 0
    info = json.loads(out)
    assert info["format"] == "placer.opgraph/v1" and info["digest"].startswith("sha256:")


def test_validate_names_the_bad_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "placer.opgraph/v1", "name": "g", "nodes": [
        {"id": "a", "op": "x", "fwd_s": 1.0}, {"id": "b", "op": "x", "fwd_s": -1.0}], "edges": []}))
    code, _, err = run(capsys, "validate", str(bad))
    assert code == 2
    assert "nodes[1].fwd_s" in err and "'b'" in err


def test_validate_reports_cycle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "cycle.json"
    bad.write_text(json.dumps({"format": "placer.opgraph/v1", "name": "g", "nodes": [
        {"id": n, "op": "x", "fwd_s": 1.0} for n in "abc"], "edges": [
        {"src": "a", "dst": "b"}, {"src": "b", "dst": "c"}, {"src": "c", "dst": "a"}]}))
    code, _, err = run(capsys, "validate", str(bad), "--json")
    assert code == 2
    problem = json.loads(err)
    assert "cycle" in problem["detail"] and problem["field"] == "edges"


def test_unknown_format_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"format": "nope/v9"}))
    code, _, err = run(capsys, "validate", str(bad))
    assert code == 2 and "unknown document format" in err


def test_solve_then_simulate_agree(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    plan = files["dir"] / "plan.json"
    code, out, _ = run(capsys, "solve", "--solver", "even", "--graph", str(files["graph"]), "--topology",
                       str(files["topo"]), "--stages", "2", "--micro-batches", "4", "-o", str(plan), "--json")
    assert code == 0
    solved = json.loads(out)
    code, out, _ = run(capsys, "simulate", "--graph", str(files["graph"]), "--topology", str(files["topo"]),
                       "--plan", str(plan), "--json")
    assert code == 0
    metrics = json.loads(out)
    for key in ("iteration_s", "throughput_samples_per_s", "latency_s", "stage_times_s", "bottleneck_stage_s",
                "bubble_fraction", "peak_memory_bytes", "lower_bound_s", "efficiency"):
        assert key in metrics
    assert metrics["iteration_s"] == pytest.approx(solved["metrics"]["iteration_s"])
    assert json.loads(plan.read_text())["metrics"]["iteration_s"] == pytest.approx(metrics["iteration_s"])
    assert len(metrics["stage_times_s"]) == 2
    assert metrics["bottleneck_stage_s"] == pytest.approx(max(metrics["stage_times_s"]))


def test_hand_written_plan(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    graph = json.loads(files["graph"].read_text())
    topo = json.loads(files["topo"].read_text())
    ids = [n["id"] for n in graph["nodes"]]
    half = len(ids) // 2
    plan = files["dir"] / "mine.json"
    plan.write_text(json.dumps({"format": "placer.plan/v1", "micro_batches": 4, "schedule": "gpipe", "stages": [
        {"ops": ids[:half], "devices": [topo["devices"][0]["id"]]},
        {"ops": ids[half:], "devices": [topo["devices"][1]["id"]]}]}))
    assert run(capsys, "validate", str(plan), "--graph", str(files["graph"]), "--topology", str(files["topo"]))[0] == 0
    code, out, _ = run(capsys, "simulate", "--graph", str(files["graph"]), "--topology", str(files["topo"]),
                       "--plan", str(plan), "--json")
    assert code == 0 and json.loads(out)["schedule"] == "gpipe"


def test_solve_unknown_solver_and_option(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--graph", str(files["graph"]), "--topology", str(files["topo"]), "-o", str(files["dir"] / "p.json")]
    code, _, err = run(capsys, "solve", "--solver", "nope", *common)
    assert code == 2 and "even" in err
    code, _, err = run(capsys, "solve", "--solver", "even", "--option", "bogus=1", *common)
    assert code == 2 and "bogus" in err


def test_latency_solve(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    plan = files["dir"] / "lat.json"
    code, out, _ = run(capsys, "solve", "--solver", "single", "--objective", "latency", "--pass", "training",
                       "--graph", str(files["graph"]), "--topology", str(files["topo"]), "-o", str(plan), "--json")
    assert code == 0
    assert json.loads(out)["metrics"]["latency_s"] > 0
    assert json.loads(plan.read_text())["pass"] == "training"


def test_generate_unknown_kind_and_param(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "topology", "generate", "nope", "-o", str(tmp_path / "t.json"))
    assert code == 2 and "hierarchical" in err
    code, _, err = run(capsys, "topology", "generate", "hierarchical", "--bogus", "1", "-o", str(tmp_path / "t.json"))
    assert code == 2 and "--bogus" in err


def test_generate_is_seeded(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for out in (a, b):
        assert run(capsys, "topology", "generate", "uniform_dist", "--devices", "8", "--seed", "3", "-o", str(out))[0] == 0
    assert a.read_text() == b.read_text()


@pytest.mark.skipif(not (DATA / "pipedream").exists(), reason="shared data not present")
def test_import_pipedream(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "resnet18.json"
    code, _, _ = run(capsys, "graph", "import", "--from", "pipedream", str(DATA / "pipedream/profiles/resnet18/graph.txt"),
                     "-o", str(out))
    assert code == 0
    assert run(capsys, "validate", str(out))[0] == 0


def test_solvers_catalogue_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "catalogue", "list", "--json")
    assert code == 0
    names = {s["name"] for s in json.loads(out)}
    assert {"even", "single"} <= names


def test_graph_scale_from_profiles(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    paths = []
    for mb in (1, 2, 4):
        out = tmp_path / f"p{mb}.json"
        assert run(capsys, "graph", "generate", "transformer", "--layers", "1", "--micro-batch", str(mb),
                   "-o", str(out))[0] == 0
        paths.append(out)
    target = tmp_path / "big.json"
    code, out, _ = run(capsys, "graph", "scale", "--profiles", *map(str, paths), "--batch", "16",
                       "-o", str(target), "--json")
    assert code == 0 and json.loads(out)["profiled_batch_size"] == 16
    small = json.loads(paths[0].read_text())["nodes"]
    big = json.loads(target.read_text())["nodes"]
    assert sum(n["act_bytes"] for n in big) > 8 * sum(n["act_bytes"] for n in small)


@pytest.mark.parametrize("what", ["graph", "topology"])
def test_graphml_export_then_import_is_exact(files: dict[str, Path], capsys: pytest.CaptureFixture[str],
                                             what: str) -> None:
    source = files["graph" if what == "graph" else "topo"]
    exported, back = files["dir"] / f"{what}.graphml", files["dir"] / f"{what}.back.json"
    assert run(capsys, what, "export", str(source), "-o", str(exported))[0] == 0
    code, out, _ = run(capsys, what, "import", "--from", "graphml", str(exported), "-o", str(back), "--json")
    assert code == 0
    assert json.loads(back.read_text()) == json.loads(source.read_text())
    _, validated, _ = run(capsys, "validate", str(source), "--json")
    assert json.loads(out)["digest"] == json.loads(validated)["digest"]


def test_graphml_to_stdout_and_renamed_import(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    code, text, _ = run(capsys, "graph", "export", "--format", "graphml", str(files["graph"]))
    assert code == 0 and text.startswith("<graphml")
    exported, back = files["dir"] / "g.graphml", files["dir"] / "g.json"
    exported.write_text(text)
    code, out, _ = run(capsys, "graph", "import", "--from", "graphml", str(exported), "-o", str(back), "--name", "renamed")
    assert code == 0 and "nodes" in out and json.loads(back.read_text())["name"] == "renamed"


def test_graphml_import_of_a_bad_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.graphml"
    bad.write_text("<graphml><graph")
    code, _, err = run(capsys, "graph", "import", "--from", "graphml", str(bad), "-o", str(tmp_path / "out.json"))
    assert code == 2 and "invalid GraphML" in err


def test_dot_export_draws_a_plans_stages(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    plan = files["dir"] / "dot-plan.json"
    assert run(capsys, "solve", "--solver", "even", "--graph", str(files["graph"]), "--topology", str(files["topo"]),
               "--micro-batches", "2", "-o", str(plan), "--quiet")[0] == 0
    code, text, _ = run(capsys, "graph", "export", "--format", "dot", str(files["graph"]), "--plan", str(plan),
                        "--topology", str(files["topo"]))
    assert code == 0 and text.startswith("digraph") and "subgraph cluster_" in text


def test_a_plan_outside_dot_is_refused_naming_the_option(files: dict[str, Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "graph", "export", str(files["graph"]), "--plan", "p.json")
    assert code == 2 and "--format dot" in err


def test_settings_that_are_not_json_exit_2_naming_the_flag(files: dict[str, Path],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "solve", "--graph", str(files["graph"]), "--topology", str(files["topo"]),
                       "--settings", "{bad", "-o", str(files["dir"] / "p.json"))
    assert code == 2 and "--settings: not JSON" in err


def test_solve_prints_the_plans_notes(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    plan = files["dir"] / "plan.json"
    common = ("--graph", str(files["graph"]), "--topology", str(files["topo"]), "--stages", "2", "-o", str(plan))
    code, out, _ = run(capsys, "solve", "--solver", "exact", "--option", "max_ideals=2", *common)
    assert code == 0 and "unknown" in out
    assert "  note: ideals: more than 2 in the whole graph" in out
    code, out, _ = run(capsys, "solve", "--solver", "exact", "--option", "max_ideals=2", *common, "--json")
    assert any("ideals: more than 2" in n for n in json.loads(out)["notes"])


def test_global_batch_solve_simulate_and_bad_value(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    plan = files["dir"] / "plan.json"
    common = ("--graph", str(files["graph"]), "--topology", str(files["topo"]))
    code, out, _ = run(capsys, "solve", "--solver", "even", *common, "--global-batch", "32", "--micro-batches", "2,8",
                       "-o", str(plan), "--json")
    assert code == 0
    solved = json.loads(out)["metrics"]
    assert solved["samples_per_iteration"] == 32 and solved["micro_batches"] in (2, 8)
    code, out, _ = run(capsys, "simulate", *common, "--plan", str(plan), "--global-batch", "32", "--json")
    assert code == 0 and json.loads(out)["iteration_s"] == pytest.approx(solved["iteration_s"], rel=1e-12)
    code, _, err = run(capsys, "solve", "--solver", "even", *common, "--global-batch", "12", "--micro-batches", "8",
                       "-o", str(plan))
    assert code == 2 and "settings.global_batch: 12 samples do not split into 8 equal micro-batches" in err


def test_solve_refuses_settings_that_do_not_fit_naming_them(files: dict[str, Path],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The library's check, as the service makes it at submission: 4 devices here."""
    common = ["--solver", "even", "--graph", str(files["graph"]), "--topology", str(files["topo"]),
              "-o", str(files["dir"] / "p.json")]
    for flags, field in ((["--stages", "1000000"], "settings.stages"), (["--replicas", "5"], "settings.replicas"),
                         (["--settings", '{"stage_memory_caps_bytes": {"9": 1}}'], "settings.stage_memory_caps_bytes.9")):
        code, _, err = run(capsys, "solve", *common, *flags)
        assert code == 2 and err.startswith(f"error: {field}:"), err
    assert not (files["dir"] / "p.json").exists()


def _roofline_graph(files: dict[str, Path]) -> Path:
    """The fixture's graph with extract's marks of roofline times estimated for an A100 (the topology's are H100s)."""
    doc = json.loads(files["graph"].read_text())
    doc["attrs"] = {**doc.get("attrs", {}), "estimate": {"device_kind": "A100", "rule": "roofline"}}
    path = files["dir"] / "roofline.json"
    path.write_text(json.dumps(doc))
    return path


def test_solve_and_simulate_warn_about_the_graphs_times(files: dict[str, Path],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    graph, plan = _roofline_graph(files), files["dir"] / "plan.json"
    common = ("--graph", str(graph), "--topology", str(files["topo"]))
    code, out, _ = run(capsys, "solve", "--solver", "even", *common, "--stages", "2", "-o", str(plan))
    assert code == 0 and "warning: the graph's times are for device kind 'A100'" in out
    assert "warning: the graph's op times are roofline estimates" in out
    assert [w["code"] for w in json.loads(plan.read_text())["warnings"]] == ["times-from-absent-kind",
                                                                              "roofline-times"]
    code, out, _ = run(capsys, "simulate", *common, "--plan", str(plan), "--json")
    assert code == 0 and len(json.loads(out)["warnings"]) == 2
    code, out, _ = run(capsys, "solve", "--solver", "even", "--graph", str(files["graph"]), "--topology",
                       str(files["topo"]), "--stages", "2", "-o", str(plan))
    assert code == 0 and "warning" not in out


def test_a_generated_cpu_topology_takes_a_cpu_profiled_graph_without_warning(files: dict[str, Path],
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`placer topology generate ... --device cpu` gives devices of kind "cpu", the kind `placer profile
    --device cpu` records: solve raises no device-kind warning (it did with the generator's GPU kinds)."""
    topo, plan = files["dir"] / "cpus.json", files["dir"] / "plan.json"
    code, _, err = run(capsys, "topology", "generate", "hierarchical", "--nodes", "1", "--gpus-per-node", "2",
                       "--device", "cpu", "-o", str(topo))
    assert code == 0, err
    assert {d["kind"] for d in json.loads(topo.read_text())["devices"]} == {"cpu"}
    doc = json.loads(files["graph"].read_text())
    doc["attrs"] = {**doc.get("attrs", {}), "profile": {"device": "cpu", "device_kind": "cpu"}}  # as profiled
    graph = files["dir"] / "profiled.json"
    graph.write_text(json.dumps(doc))
    code, out, _ = run(capsys, "solve", "--solver", "even", "--graph", str(graph), "--topology", str(topo),
                       "--stages", "2", "-o", str(plan))
    assert code == 0 and "warning" not in out, out
    assert not json.loads(plan.read_text()).get("warnings")
    code, out, _ = run(capsys, "solve", "--solver", "even", "--graph", str(graph), "--topology", str(files["topo"]),
                       "--stages", "2", "-o", str(plan))
    assert code == 0 and "warning: the graph's times are for device kind 'cpu'" in out  # on the H100s


def test_compare_with_a_run_record_says_what_to_do_next(files: dict[str, Path],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from launcher.compare import stage_forward_s
    from solvers.model.documents import load_graph, load_plan, load_topology
    from tests.run_records import synthetic_run

    plan_path, run_path = files["dir"] / "plan.json", files["dir"] / "run.json"
    common = ("--graph", str(files["graph"]), "--topology", str(files["topo"]))
    assert run(capsys, "solve", "--solver", "even", *common, "--stages", "2", "-o", str(plan_path))[0] == 0
    plan = load_plan(plan_path)
    model = stage_forward_s(load_graph(files["graph"]), load_topology(files["topo"]), plan, backward=True, passes=1)
    simulated = plan.metrics["objective_s"] if plan.metrics else 0.0

    def advice(iteration: float, stages: list[float]) -> list[str]:
        doc = synthetic_run(plan.to_document())
        doc["summary"].update(iteration_s=iteration, stage_times_s=stages)
        run_path.write_text(json.dumps(doc))
        code, out, _ = run(capsys, "simulate", *common, "--plan", str(plan_path), "--compare", str(run_path), "--json")
        assert code == 0
        rows = json.loads(out)["comparison"]
        assert [r["what"] for r in rows] == ["iteration", "stage 0 compute", "stage 1 compute"]
        return list(json.loads(out)["next_steps"])

    assert advice(3 * simulated, [3 * t for t in model])[0].startswith("calibrate: measured is 3x")
    assert advice(3 * simulated, [model[0], 4 * model[1]])[0].startswith("re-plan:")
    assert advice(simulated, model)[0].startswith("none:")
    code, out, _ = run(capsys, "simulate", *common, "--plan", str(plan_path), "--compare", str(run_path))
    assert code == 0 and "next: none" in out and "stage rows: the profiled times" not in out

    # the profiled step (step 1) took twice the plain one: the stage rows are the profiled figures at half
    doc = synthetic_run(plan.to_document())
    doc["summary"].update(iteration_s=simulated, stage_times_s=[2 * t for t in model])
    for rank in doc["ranks"]:
        rank["iterations_s"] = [rank["iterations_s"][0], 2 * rank["iterations_s"][0]]
    run_path.write_text(json.dumps(doc))
    code, out, _ = run(capsys, "simulate", *common, "--plan", str(plan_path), "--compare", str(run_path), "--json")
    rows = json.loads(out)["comparison"]
    assert code == 0 and [r["measured_s"] for r in rows[1:]] == pytest.approx(model)
    assert [r["profiled_s"] for r in rows[1:]] == pytest.approx([2 * t for t in model])
    code, out, _ = run(capsys, "simulate", *common, "--plan", str(plan_path), "--compare", str(run_path))
    assert code == 0 and "stage rows: the profiled times x 0.5, the run's plain over profiled steps" in out


def test_compare_refuses_the_run_of_another_plan(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """A run.json of another plan of the same graph set beside this plan's prediction compared
    unrelated figures and advised on them; the run record names its plan by digest."""
    from tests.run_records import synthetic_run

    common = ("--graph", str(files["graph"]), "--topology", str(files["topo"]))
    ran, other = files["dir"] / "ran.json", files["dir"] / "other.json"
    assert run(capsys, "solve", "--solver", "even", *common, "--stages", "2", "-o", str(ran))[0] == 0
    assert run(capsys, "solve", "--solver", "even", *common, "--stages", "1", "-o", str(other))[0] == 0
    record = files["dir"] / "ran-run.json"
    record.write_text(json.dumps(synthetic_run(json.loads(ran.read_text()))))
    code, _, err = run(capsys, "simulate", *common, "--plan", str(other), "--compare", str(record))
    assert code == 2 and "plan_digest" in err and "another plan" in err
    code, _, _ = run(capsys, "simulate", *common, "--plan", str(ran), "--compare", str(record))
    assert code == 0


def test_solve_infeasible_shows_the_memory_it_needs(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    tiny = files["dir"] / "tiny.json"
    assert run(capsys, "topology", "generate", "hierarchical", "--nodes", "1", "--gpus-per-node", "2",
               "--memory-gib", "0.0001", "-o", str(tiny))[0] == 0
    plan = files["dir"] / "plan.json"
    code, out, _ = run(capsys, "solve", "--solver", "even", "--graph", str(files["graph"]), "--topology", str(tiny),
                       "--no-recompute", "--micro-batches", "2", "-o", str(plan))
    assert code == 1 and "infeasible" in out
    assert "memory: any plan without recomputation needs at least" in out and "the 2 devices offer 0.00 GiB" in out
    doc = json.loads(plan.read_text())
    assert doc["stats"]["memory_need_total_bytes"] > doc["stats"]["memory_usable_bytes"]


def test_tp_flags_fix_bound_and_name_the_setting(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """``--tp 2`` fixes every stage's degree; ``--max-tp 1`` searches none; a bad degree names the setting."""
    graph = files["dir"] / "gpt.json"
    assert run(capsys, "graph", "generate", "transformer", "--layers", "2", "--causal", "true", "-o", str(graph))[0] == 0
    common = ("--solver", "exact", "--graph", str(graph), "--topology", str(files["topo"]), "--micro-batches", "4")
    code, out, _ = run(capsys, "solve", *common, "--tp", "2", "-o", str(files["dir"] / "tp.json"), "--json")
    assert code == 0, out
    stages = json.loads((files["dir"] / "tp.json").read_text())["stages"]
    assert stages and all(s["tp"] == 2 for s in stages)
    code, _, _ = run(capsys, "solve", *common, "--max-tp", "1", "-o", str(files["dir"] / "none.json"))
    assert code == 0 and all("tp" not in s for s in json.loads((files["dir"] / "none.json").read_text())["stages"])
    for flags, message in ((["--tp", "3"], "settings.tp: must be a power of two"),
                           (["--tp", "4", "--schedule", "zbv"], "settings.tp: tensor-parallel stages (tp 4) run under"),
                           (["--tp", "4"], "settings.tp: a tensor-parallel group of 4 devices does not fit a host")):
        code, _, err = run(capsys, "solve", *common, *flags, "-o", str(files["dir"] / "bad.json"))
        assert code == 2 and err.startswith(f"error: {message}"), err
    code, _, err = run(capsys, "solve", *common, "--tp", "4", "--tp-across-hosts", "-o", str(files["dir"] / "x.json"))
    assert code == 0, err


def test_simulate_refuses_replicas_that_do_not_split_the_micro_batch(files: dict[str, Path],
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The generated transformer's micro-batch has 8 rows: 3 replicas of a stage would hold 8/3 samples each."""
    plan = files["dir"] / "plan.json"
    common = ("--graph", str(files["graph"]), "--topology", str(files["topo"]))
    assert run(capsys, "solve", "--solver", "even", *common, "--stages", "2", "--replicas", "2",
               "--micro-batches", "4", "-o", str(plan))[0] == 0
    doc = json.loads(plan.read_text())
    devices = [d for stage in doc["stages"] for d in stage["devices"]]
    doc["stages"][0]["devices"], doc["stages"][1]["devices"] = devices[:3], devices[3:]
    plan.write_text(json.dumps(doc))
    code, _, err = run(capsys, "simulate", *common, "--plan", str(plan))
    assert code == 2
    assert "stages[0].devices: the micro-batch of 8 rows does not split evenly over 3 replicas" in err
