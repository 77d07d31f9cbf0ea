"""What turns a pipelined step into training: the optimizer, its learning-rate schedule, clipping, checkpoints.

- **Optimizer**: any :mod:`torch.optim` class by name (``--optimizer AdamW``, the default) with
  keyword arguments (``--optimizer-arg weight_decay=0.1``, values read as JSON when they parse).
  Each rank steps the parameters of its stage; tied parameters have equal gradients in every stage
  that reads them (:class:`launcher.runtime.pipeline.TiedGroups`), so their copies stay equal.
- **Learning rate**: linear warm-up over ``--lr-warmup`` steps from 0 to ``--lr``, then
  ``--lr-decay`` (``constant``, ``linear`` or ``cosine``) down to 0 at the last step.
- **Clipping**: ``--clip-norm`` scales every gradient by ``min(1, clip / norm)`` where ``norm`` is
  the global L2 norm of the model's gradient across all stages: each parameter is counted once
  (its first stage, replica 0), the squares summed over the world.
- **Checkpoints**: ``--save DIR`` writes every stage's parameters, optimizer state and step with
  :mod:`torch.distributed.checkpoint` (``DIR/step<N>/stage<s>``, written by the stage's replica 0,
  after the last step and every ``--save-every`` steps); ``--resume DIR`` (a ``step<N>`` folder,
  or the latest one in DIR) loads them into every replica and continues at step N with the same
  batches and learning rate, so a resumed run follows the same loss trajectory.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.tensor import DTensor

from solvers.model.errors import InvalidInput


def optimizer_class(name: str) -> type[torch.optim.Optimizer]:
    """The :mod:`torch.optim` class called ``name``; refuses an unknown name, listing the valid ones."""
    found = getattr(torch.optim, name, None)
    if not (isinstance(found, type) and issubclass(found, torch.optim.Optimizer)):
        valid = sorted(n for n in dir(torch.optim) if isinstance(getattr(torch.optim, n), type)
                       and issubclass(getattr(torch.optim, n), torch.optim.Optimizer) and n != "Optimizer")
        raise InvalidInput(f"--optimizer {name!r} is not a torch.optim optimizer (valid: {', '.join(valid)})",
                           field="optimizer", ref=name)
    return found


def optimizer_kwargs(pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` pairs; a value is JSON when it parses (``betas=[0.9,0.95]``), else a string."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise InvalidInput(f"--optimizer-arg {pair!r}: expected KEY=VALUE", field="optimizer_arg", ref=pair)
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def make_optimizer(name: str, pairs: Sequence[str], params: Sequence[torch.nn.Parameter],
                   lr: float) -> torch.optim.Optimizer:
    cls = optimizer_class(name)
    kwargs = {"lr": lr, **optimizer_kwargs(pairs)}
    try:
        return cls(list(params), **kwargs)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"--optimizer {name} with {kwargs}: {exc}", field="optimizer", ref=name) from None


def learning_rate(step: int, base: float, warmup: int, total: int, decay: str) -> float:
    """The learning rate of optimizer step ``step`` (0-based) of ``total``."""
    if warmup > 0 and step < warmup:
        return base * (step + 1) / warmup
    if decay == "constant" or total <= warmup + 1:
        return base
    done = (step - warmup) / (total - warmup - 1)
    if decay == "linear":
        return base * (1.0 - done)
    if decay == "cosine":
        return base * 0.5 * (1.0 + math.cos(math.pi * done))
    raise InvalidInput(f"--lr-decay {decay!r}: expected constant, linear or cosine", field="lr_decay", ref=decay)


def squared_gradient_sum(params: Iterable[torch.nn.Parameter]) -> torch.Tensor:
    """The sum of the squares of the parameters' gradient entries, in float64 (one value, on their device)."""
    total: torch.Tensor | None = None
    for p in params:
        if p.grad is not None:
            grad = p.grad.detach()
            grad = grad.to_local() if isinstance(grad, DTensor) else grad  # a tensor-parallel shard: its own part
            term = grad.double().pow(2).sum()
            total = term if total is None else total + term
    return torch.zeros((), dtype=torch.float64) if total is None else total


def scale_gradients(params: Iterable[torch.nn.Parameter], norm: float, max_norm: float) -> None:
    """Multiply every gradient by ``max_norm / (norm + 1e-6)`` where that is below 1 (clipping at ``max_norm``)."""
    scale = max_norm / (norm + 1e-6)
    if scale < 1.0:
        for p in params:
            if p.grad is not None:
                p.grad.mul_(scale)


def clip_global_norm(params: Mapping[str, torch.nn.Parameter], counted: set[str], max_norm: float,
                     device: torch.device) -> float:
    """Scale every gradient so that the model's global gradient norm is at most ``max_norm``; the norm before.

    ``counted``: the parameters this rank adds to the norm (each parameter once in the world).
    The single-process reference (:func:`launcher.verify.reference_losses`) clips with the same
    two functions, so both sides compute the norm in float64 and scale by the same factor.
    """
    total = torch.zeros((), dtype=torch.float64, device=device)
    total += squared_gradient_sum(p for name, p in params.items() if name in counted).to(device)
    dist.all_reduce(total)
    norm = float(total.sqrt())
    scale_gradients(params.values(), norm, max_norm)
    return norm


def save_checkpoint(folder: Path, stage: int, params: Mapping[str, torch.nn.Parameter],
                    optimizer: torch.optim.Optimizer, step: int) -> None:
    """This stage's parameters, optimizer state and next step, with ``torch.distributed.checkpoint``."""
    by_param = {id(p): name for name, p in params.items()}
    state: dict[str, Any] = {"params": {k: p.detach() for k, p in params.items()},
                             "optim": {by_param[id(p)]: dict(s) for p, s in optimizer.state.items() if id(p) in by_param},
                             "step": torch.tensor(step)}
    dcp_save(state, checkpoint_id=str(folder / f"stage{stage}"), no_dist=True)


def latest_checkpoint(folder: Path) -> Path:
    """``folder`` itself when it holds stages, else its latest ``step<N>`` checkpoint."""
    steps = sorted((int(p.name[4:]), p) for p in folder.glob("step*") if p.name[4:].isdigit())
    return steps[-1][1] if steps and not any(folder.glob("stage*")) else folder


def load_checkpoint(folder: Path, stage: int, params: Mapping[str, torch.nn.Parameter],
                    optimizer: torch.optim.Optimizer) -> int:
    """Load what :func:`save_checkpoint` wrote for ``stage``; returns the step to continue at."""
    path = folder / f"stage{stage}"
    if not (path / ".metadata").exists():
        raise InvalidInput(f"--resume {folder}: no checkpoint of stage {stage} ({path} has no .metadata)",
                           field="resume", ref=str(path))
    metadata = FileSystemReader(str(path)).read_metadata().state_dict_metadata
    optim: dict[str, dict[str, torch.Tensor]] = {}
    for key, meta in metadata.items():
        parts = key.split(".")
        if parts[0] == "optim":  # optim.<parameter name>.<state key>
            name, slot = ".".join(parts[1:-1]), parts[-1]
            size = getattr(meta, "size", torch.Size([]))
            dtype = meta.properties.dtype if hasattr(meta, "properties") else torch.float32
            optim.setdefault(name, {})[slot] = torch.empty(size, dtype=dtype)
    missing = sorted(set(params) - {k.split(".", 1)[1] for k in metadata if k.startswith("params.")})
    if missing:
        raise InvalidInput(f"--resume {folder}: stage {stage}'s checkpoint has no parameter {missing[0]!r} "
                           "(was it saved from another plan?)", field="resume", ref=missing[0])
    state: dict[str, Any] = {"params": {k: p.detach() for k, p in params.items()}, "optim": optim,
                             "step": torch.tensor(0)}
    dcp_load(state, checkpoint_id=str(path), no_dist=True)
    for name, slots in optim.items():
        if name in params:
            p = params[name]
            optimizer.state[p] = {k: v.to(p.device) for k, v in slots.items()}
    return int(state["step"])
