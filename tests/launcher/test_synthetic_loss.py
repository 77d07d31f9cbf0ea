"""The default synthetic loss trains a model whose output sits behind a final normalisation; the
single-process reference runs on one thread, as every rank does."""

from __future__ import annotations

import pytest
import torch

from launcher.runtime.data import SyntheticData, synthetic_loss
from solvers.model.errors import InvalidInput


def test_the_loss_is_a_regression_to_cos_k() -> None:
    o = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0]])
    want = ((o - torch.cos(torch.arange(3.0))) ** 2).mean() + (torch.tensor(3.0) - 1.0) ** 2
    got = synthetic_loss((o, torch.tensor(3.0), torch.ones(2, dtype=torch.int64)))
    assert got.item() == pytest.approx(want.item(), rel=1e-6)


@pytest.mark.parametrize("norm", [torch.nn.LayerNorm, torch.nn.RMSNorm])
def test_a_final_normalisation_leaves_a_gradient_well_above_rounding(norm: type[torch.nn.Module]) -> None:
    """``mean(o ** 2)`` behind a norm is constant: its input gradient is rounding noise; this loss's is not."""
    torch.manual_seed(0)
    x = torch.randn(4, 16, 64, requires_grad=True)
    layer = norm(64)
    synthetic_loss((layer(x),)).backward()
    assert x.grad is not None
    ours = float(x.grad.abs().max())
    x.grad = None
    layer(x).pow(2).mean().backward()
    plain = float(x.grad.abs().max())
    assert plain < 1e-3 * ours  # the square's gradient is noise beside this one
    assert ours > 1e-4


def test_a_model_without_floating_outputs_is_refused() -> None:
    with pytest.raises(InvalidInput, match="no floating-point output"):
        SyntheticData([]).loss((torch.ones(2, dtype=torch.int64),), torch.zeros(2))


def test_the_reference_runs_on_one_thread_as_the_ranks_do() -> None:
    """A kernel split over threads adds in another order: the reference takes one thread, then gives them back."""
    from launcher.verify import one_thread

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError, match="inside"), one_thread():
            assert torch.get_num_threads() == 1
            raise RuntimeError("inside")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
