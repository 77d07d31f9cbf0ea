"""Seeded weights by name: a rank computes the initial value of its own parameters and buffers only.

The model is built once on ``meta`` (no memory) while :class:`InitLog` records every tensor op
the construction runs: the allocations (``empty``, ``zeros``, ``arange``), the initialisers
(``normal_``, ``uniform_``, ``fill_``, ``zero_``, the ``erfinv_`` / ``mul_`` / ``clamp_`` of a
truncated normal, a ``copy_`` from a computed tensor) and the conversions (``module.to(dtype)``).
A transformers model built on ``meta`` skips its own ``_init_weights``; :func:`record_build`
runs it under the log, so the log holds what a CPU build runs (``trunc_normal_`` by the inverse
CDF).  An initialiser that returns at once on ``meta`` (``orthogonal_``, ``dirac_``,
``sparse_``) leaves a tensor allocated and never written: asking for its value is refused,
naming it (give ``--weights``).

A tensor's value is the replay, on the CPU, of the ops that made and wrote its storage (and of
the ops that made what those read), in the recorded order, under a random generator seeded by
the source's seed and the tensor's name (:func:`name_seed`).  The value depends on the name
only, not on which other tensors a process materialises: every rank computes exactly the values
the single-process model (:func:`seeded_model`) holds, from the same distributions the model's
own initialisation draws from.  A tied parameter has one name (its first) and one value.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from extract.build import build
from extract.source import BuiltModel
from solvers.model.errors import InvalidInput


def name_seed(seed: int, name: str) -> int:
    """The generator seed of tensor ``name`` (first 8 bytes of sha256 of ``"seed:name"``, 63 bits)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "big") & (2**63 - 1)


def _key(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


@dataclass(frozen=True)
class _Ref:
    """A recorded tensor: its storage and how it views it."""

    key: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    dtype: torch.dtype
    nbytes: int  # of the storage

    @staticmethod
    def of(t: torch.Tensor) -> _Ref:
        return _Ref(_key(t), tuple(t.shape), tuple(t.stride()), int(t.storage_offset()), t.dtype,
                    int(t.untyped_storage().nbytes()))

    def covers_storage(self) -> bool:
        """The whole storage, in order: a write through it leaves nothing of what was there."""
        return (self.offset == 0 and self.stride == tuple(torch.empty(self.shape, device="meta").stride())
                and math.prod(self.shape) * self.dtype.itemsize == self.nbytes)


@dataclass
class _Op:
    func: Any
    args: Any  # pytree, tensors replaced by _Ref
    kwargs: Any
    outputs: list[_Ref]  # every tensor output, in pytree order
    creates: set[int]  # storages first seen as this op's output
    writes: set[int]  # storages of arguments the op mutates
    reads: set[int]  # storages of every tensor argument


def _written(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> set[int]:
    out: set[int] = set()
    schema = func._schema
    for i, arg in enumerate(schema.arguments):
        info = arg.alias_info
        if info is None or not info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        for t in tree_flatten(value)[0]:
            if isinstance(t, torch.Tensor):
                out.add(_key(t))
    return out


class InitLog(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Every op run while it is active, with the storages each one makes, writes and reads."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: list[_Op] = []
        self.known: set[int] = set()
        self.external: dict[int, torch.Tensor] = {}  # storages made outside the log (real data): a copy
        self._alive: list[Any] = []  # the recorded storages, alive: their keys stay unique

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: Mapping[str, Any] | None = None) -> Any:
        kwargs = dict(kwargs or {})
        out = func(*args, **kwargs)
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        for t in inputs:
            key = _key(t)
            if key not in self.known:
                self.known.add(key)
                # made without an op: on the CPU (torch.tensor(data)) its values are kept; on meta
                # (torch.tensor(0) under torch.device("meta")) it has none, and reads as zeros until an op
                # overwrites it whole (replay refuses a read before that)
                if not t.is_meta:
                    copy = t.untyped_storage().cpu().clone()  # type: ignore[no-untyped-call]
                    self.external[key] = torch.empty(0, dtype=t.dtype).set_(copy)
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        creates = {_key(t) for t in outputs} - self.known
        self.known |= creates
        self.ops.append(_Op(func, _refs(args), _refs(kwargs), [_Ref.of(t) for t in outputs], creates,
                            _written(func, args, kwargs), {_key(t) for t in inputs}))
        self._alive.extend(t.untyped_storage() for t in inputs + outputs)
        return out

    def release(self) -> None:
        """Stop keeping the recorded storages alive (after recording)."""
        self._alive.clear()

    def slice_for(self, key: int) -> list[_Op]:
        """The ops that determine storage ``key``'s final value, in recorded order."""
        needed = {key}
        chosen: list[_Op] = []
        for op in reversed(self.ops):
            if (op.creates | op.writes) & needed:
                chosen.append(op)
                needed |= op.reads
        chosen.reverse()
        return chosen

    def replay(self, target: torch.Tensor, name: str, seed: int) -> torch.Tensor:
        """``target``'s value (a CPU tensor of its shape and dtype), replayed under :func:`name_seed`.

        Refused, naming ``name``, when the value would read memory that no op wrote (an
        allocation that the model's initialiser did not fill on ``meta``).
        """
        ref = _Ref.of(target)
        if ref.key not in self.known:
            raise InvalidInput(f"{name!r}: the model's construction made this tensor without a tensor op, so it "
                               "has no seeded value; give the weights with --weights FILE", field="weights", ref=name)
        reals: dict[int, torch.Tensor] = dict(self.external)
        defined = set(self.external)

        def refuse() -> InvalidInput:
            return InvalidInput(f"{name!r}: its initialiser writes nothing on the meta device (torch.nn.init's "
                                "orthogonal_, dirac_ and sparse_ return at once there), so it has no seeded value; "
                                "give the weights with --weights FILE", field="weights", ref=name)

        def real(r: _Ref) -> torch.Tensor:
            if r.key not in reals:  # made on meta outside the log: zeros until an op overwrites it
                reals[r.key] = torch.zeros(r.nbytes // r.dtype.itemsize, dtype=r.dtype)
            base = reals[r.key]
            if tuple(base.shape) == r.shape and tuple(base.stride()) == r.stride and base.storage_offset() == r.offset:
                return base
            return torch.as_strided(base, r.shape, r.stride, r.offset)

        def arg(a: Any) -> Any:
            if isinstance(a, _Ref):
                return real(a)
            if isinstance(a, torch.device) and a.type == "meta":
                return torch.device("cpu")
            return None if isinstance(a, torch.Generator) else a  # every draw from the name's generator

        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(name_seed(seed, name))
            for op in self.slice_for(ref.key):
                overwritten = _overwritten(op)
                if any(k not in defined and k != overwritten for k in op.reads):
                    raise refuse()
                out = op.func(*tree_map(arg, op.args), **tree_map(arg, op.kwargs))
                made = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
                for r, t in zip(op.outputs, made, strict=True):
                    if r.key in op.creates:
                        reals[r.key] = t
                defined |= {k for k in op.creates if op.func not in _ALLOCATIONS}
                if overwritten is not None:
                    defined.add(overwritten)
            if ref.key not in defined:
                raise refuse()
            value = real(ref)
        return value.detach().clone()


_ALLOCATIONS = {torch.ops.aten.empty.memory_format, torch.ops.aten.empty_strided.default,
                torch.ops.aten.empty_like.default, torch.ops.aten.new_empty.default,
                torch.ops.aten.new_empty_strided.default}
_OVERWRITES = {torch.ops.aten.fill_.Scalar, torch.ops.aten.fill_.Tensor, torch.ops.aten.zero_.default,
               torch.ops.aten.normal_.default, torch.ops.aten.uniform_.default, torch.ops.aten.copy_.default,
               torch.ops.aten.bernoulli_.float, torch.ops.aten.exponential_.default,
               torch.ops.aten.random_.default, torch.ops.aten.random_.to}


def _overwritten(op: _Op) -> int | None:
    """The storage an op overwrites whole (``normal_``, ``fill_``, ``copy_`` into all of it), if any."""
    first = op.args[0] if op.args else None
    if op.func in _OVERWRITES and isinstance(first, _Ref) and first.covers_storage():
        return first.key
    return None


def _refs(tree: Any) -> Any:
    return tree_map(lambda a: _Ref.of(a) if isinstance(a, torch.Tensor) else a, tree)


@dataclass
class Seeded:
    """The model on ``meta`` and the log of its construction: any tensor's seeded value by name."""

    built: BuiltModel
    log: InitLog
    seed: int
    names: dict[str, torch.Tensor] = field(default_factory=dict)  # first name -> the model's (meta) tensor

    def __post_init__(self) -> None:
        module = self.built.module
        for name, t in [*module.named_parameters(), *module.named_buffers()]:  # first names only
            self.names.setdefault(name, t)

    def value(self, name: str) -> torch.Tensor:
        """The seeded value of the parameter or buffer ``name`` (its first name), on the CPU."""
        if name not in self.names:
            raise InvalidInput(f"{name!r} is not a parameter or buffer of the model", field="weights", ref=name)
        return self.log.replay(self.names[name], name, self.seed)


def _trunc_normal(tensor: torch.Tensor, mean: float, std: float, a: float, b: float,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """A truncated normal by the inverse CDF (exact in distribution; no data-dependent loop, so it records on meta)."""
    def cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    with torch.no_grad():
        lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
        tensor.uniform_(2 * lo - 1, 2 * hi - 1, generator=generator)
        tensor.erfinv_()
        tensor.mul_(std * math.sqrt(2.0))
        tensor.add_(mean)
        tensor.clamp_(min=a, max=b)
    return tensor


def record_build(source: Mapping[str, Any]) -> Seeded:
    """:func:`extract.build.build` on ``meta`` under an :class:`InitLog`, the model's own initialisation included.

    On ``meta`` transformers skips its ``_init_weights`` (``init_weights`` checks the device):
    it runs here under the log all the same.  ``torch.nn.init.trunc_normal_`` returns at once on
    ``meta`` and samples by rejection (a loop on the values): while recording it samples by the
    inverse CDF instead (the same distribution).
    """
    log = InitLog()
    saved = torch.nn.init._no_grad_trunc_normal_
    torch.nn.init._no_grad_trunc_normal_ = _trunc_normal
    try:
        with log:
            built = build(source, "meta")
            initialize = getattr(built.module, "initialize_weights", None)
            if callable(initialize) and hasattr(built.module, "_init_weights"):
                initialize()
    finally:
        torch.nn.init._no_grad_trunc_normal_ = saved
    # the recorded storages may go now: their keys stayed unique while the log ran, and the model's own
    # tensors (the only ones asked for later) are alive.  A model built on the CPU (a SPEC's) is freed here.
    log.release()
    return Seeded(built, log, int(source.get("seed", 0)))


def seeded_model(source: Mapping[str, Any]) -> torch.nn.Module:
    """The single-process model with every parameter and buffer at its seeded value, on the CPU."""
    seeded = record_build(source)
    fill(seeded.built.module, seeded.names, seeded.value)
    return seeded.built.module


def fill(module: torch.nn.Module, names: Iterable[str] | Mapping[str, Any],
         value: Callable[[str], torch.Tensor]) -> None:
    """Give ``module``'s parameters and buffers named in ``names`` (first names) their values, ties kept."""
    wanted = set(names)
    made: dict[int, torch.Tensor] = {}
    first: dict[int, str] = {}
    originals = [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]
    for name, t in originals:  # ``originals`` keeps them alive while they are replaced: their ids stay unique
        first.setdefault(id(t), name)
    for _, owner in list(module.named_modules(remove_duplicate=False)):
        for table in (owner._parameters, owner._buffers):
            for attr, t in list(table.items()):
                if t is None or first.get(id(t)) not in wanted:
                    continue
                if id(t) not in made:
                    v = value(first[id(t)])
                    made[id(t)] = torch.nn.Parameter(v, requires_grad=t.requires_grad) \
                        if isinstance(t, torch.nn.Parameter) else v
                table[attr] = made[id(t)]
