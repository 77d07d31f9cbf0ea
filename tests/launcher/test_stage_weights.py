"""A rank materialises its stage's parameters and buffers only, with the single-process model's values: seeded by
name (:mod:`launcher.runtime.seeded`) or read from a safetensors file (``--weights``).  In one process, no torchrun."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from extract.build import example_source
from launcher.runtime.model import Rebuilt, rebuild
from launcher.runtime.partition import StageGraph, assign_stages, build_stages, compute_nodes, parameter_aliases
from launcher.runtime.seeded import InitLog, record_build, seeded_model
from launcher.runtime.weights import FileWeights, SeededWeights, materialize, read_targets, write_weights
from solvers.model.errors import InvalidInput

SOURCE = example_source("gpt2", {"layers": 2, "hidden": 32, "heads": 2, "seq": 8, "vocab": 64, "dropout": 0}, 2)


@pytest.fixture(scope="module")
def rebuilt() -> Rebuilt:
    return rebuild(SOURCE)


@pytest.fixture(scope="module")
def single() -> dict[str, torch.Tensor]:
    """The single-process model's tensors by (first) name."""
    model = seeded_model(SOURCE)
    return {k: v.detach() for k, v in [*model.named_parameters(), *model.named_buffers()]}


@pytest.fixture()
def stages(rebuilt: Rebuilt) -> Iterator[list[StageGraph]]:
    """Two stages cut after the first attention (stage 1 holds the LM head, tied to stage 0's embedding)."""
    ops = [n.name for n in compute_nodes(rebuilt.module)]
    cut = ops.index("scaled_dot_product_attention") + 1
    stage_of = {name: int(i >= cut) for i, name in enumerate(ops)}
    yield build_stages(rebuilt.module, rebuilt.attr, assign_stages(rebuilt.module, stage_of), 2)


def stage_tensors(stage: StageGraph, aliases: dict[str, str]) -> dict[str, torch.Tensor]:
    return {aliases.get(t, t): getattr(stage.module.get_submodule(t.rpartition(".")[0]), t.rpartition(".")[2])
            for t in read_targets(stage.module)}


def test_a_stage_materialises_only_what_it_reads_with_the_single_process_values(
        rebuilt: Rebuilt, single: dict[str, torch.Tensor], stages: list[StageGraph]) -> None:
    assert rebuilt.seeded is not None
    aliases = parameter_aliases(rebuilt.weights)
    source = SeededWeights(rebuilt.seeded)
    whole = sum(t.numel() * t.element_size() for t in single.values())
    held = []
    for stage in stages:
        mine = stage_tensors(stage, aliases)
        got = materialize(stage.module, read_targets(stage.module), aliases, source, torch.device("cpu"))
        values = stage_tensors(stage, aliases)
        assert got == sum(single[n].numel() * single[n].element_size() for n in mine)
        assert got < whole
        for name, value in values.items():
            assert not value.is_meta
            assert torch.equal(value, single[name]), name
        held.append(set(mine))
    assert "transformer.wte.weight" in held[0] & held[1]  # the tied embedding: read by both stages
    assert "transformer.h.1.mlp.c_fc.weight" in held[1] - held[0]
    assert all(t.is_meta for t in rebuilt.weights.parameters())  # the model itself holds no memory


def test_seeded_values_follow_the_models_own_initialisation_and_depend_on_the_name_only(
        single: dict[str, torch.Tensor]) -> None:
    again = record_build(SOURCE)  # another process: builds the model anew and asks in another order
    for name in reversed(list(single)):
        assert torch.equal(again.value(name), single[name]), name
    assert torch.equal(single["transformer.h.0.ln_1.weight"], torch.ones(32))
    assert torch.equal(single["transformer.h.0.attn.c_attn.bias"], torch.zeros(96))
    assert float(single["transformer.h.0.attn.c_attn.weight"].std()) == pytest.approx(0.02, rel=0.1)
    # GPT-2 scales the residual projections by 1 / sqrt(2 * layers) (its _init_weights)
    assert float(single["transformer.h.0.mlp.c_proj.weight"].std()) == pytest.approx(0.02 / math.sqrt(4), rel=0.1)
    model = seeded_model(SOURCE)
    assert model.lm_head.weight is model.transformer.wte.weight  # tied: one tensor


def test_a_weights_file_gives_each_stage_its_own_tensors(
        tmp_path: Path, rebuilt: Rebuilt, single: dict[str, torch.Tensor], stages: list[StageGraph]) -> None:
    assert rebuilt.seeded is not None
    path = tmp_path / "gpt2.safetensors"
    assert write_weights(SOURCE, path) == len(single)
    written = load_file(str(path))
    changed = {k: v + 1 if v.is_floating_point() else v for k, v in written.items()}  # not the seeded values
    save_file(changed, str(path))
    aliases = parameter_aliases(rebuilt.weights)
    stage = stages[1]
    got = materialize(stage.module, read_targets(stage.module), aliases, FileWeights(path, rebuilt.seeded),
                      torch.device("cpu"))
    values = stage_tensors(stage, aliases)
    assert got == sum(v.numel() * v.element_size() for v in values.values())
    for name, value in values.items():
        assert torch.equal(value, changed[name]), name


def bad_file(tmp_path: Path, change: Any) -> Path:
    tensors = {k: v.clone().contiguous() for k, v in seeded_model(SOURCE).state_dict().items()
               if k != "lm_head.weight"}
    change(tensors)
    path = tmp_path / "bad.safetensors"
    save_file(tensors, str(path))
    return path


@pytest.mark.parametrize(("change", "message"), [
    (lambda t: t.pop("transformer.h.1.mlp.c_fc.weight"), "no tensor 'transformer.h.1.mlp.c_fc.weight'"),
    (lambda t: t.update({"transformer.ln_f.bias": torch.zeros(31)}), "'transformer.ln_f.bias' has shape [31]"),
    (lambda t: t.update({"transformer.wpe.weight": t["transformer.wpe.weight"].double()}),
     "'transformer.wpe.weight' is F64"),
])
def test_a_bad_weights_file_is_refused_naming_the_parameter(tmp_path: Path, rebuilt: Rebuilt, change: Any,
                                                            message: str) -> None:
    assert rebuilt.seeded is not None
    with pytest.raises(InvalidInput, match=re.escape(message)) as caught:
        FileWeights(bad_file(tmp_path, change), rebuilt.seeded)
    assert caught.value.field == "weights"


def test_a_file_that_is_not_safetensors_is_refused(tmp_path: Path, rebuilt: Rebuilt) -> None:
    assert rebuilt.seeded is not None
    path = tmp_path / "weights.pt"
    path.write_bytes(b"not safetensors")
    with pytest.raises(InvalidInput, match="not a safetensors file"):
        FileWeights(path, rebuilt.seeded)
    with pytest.raises(InvalidInput, match="no such file"):
        FileWeights(tmp_path / "missing.safetensors", rebuilt.seeded)


def test_a_model_built_on_the_cpu_replays_its_initialiser() -> None:
    """A SPEC's model is built on the CPU: ``orthogonal_`` (a QR decomposition) replays under the name's seed."""
    seeded = record_build({"spec": "tests.launcher.models:orthogonal", "inputs": None, "batch": 2, "seed": 0})
    weight = seeded.value("weight")
    assert torch.allclose(weight @ weight.T, torch.eye(4), atol=1e-5)
    assert torch.equal(weight, seeded.value("weight"))


def test_an_initialiser_that_writes_nothing_on_meta_is_refused_naming_the_tensor() -> None:
    log = InitLog()
    with log, torch.device("meta"):
        weight, bias = torch.empty(4, 4), torch.empty(4)
        torch.nn.init.orthogonal_(weight)  # returns at once on meta
        torch.nn.init.zeros_(bias)
    assert torch.equal(log.replay(bias, "bias", 0), torch.zeros(4))
    with pytest.raises(InvalidInput, match="'weight': its initialiser writes nothing on the meta device"):
        log.replay(weight, "weight", 0)
