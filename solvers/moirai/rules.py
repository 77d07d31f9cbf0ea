"""Operator-fusion rules as data (MOIRAI §III-B, Table I).

A fusion rule is an ordered list of operator types; a run of ops whose types follow a rule,
connected directly or through a multi-input connection, is fused into one op by the inference
back-end and is therefore placed as one unit.  Types are compared after normalisation
(:func:`canonical_type`): the namespace (``aten.``) and overload suffix are dropped, the name is
lower-cased and common spellings of the same operator are mapped to one name, so a rule written
in PyTorch ATen names (``aten.convolution``) also matches PipeDream profiles (``Conv2d``).

:data:`DEFAULT_RULES` holds Table I's convolution rules (Eigen GPU kernels) and the
matrix-multiply epilogue fusions of the transformer graphs we generate; a request replaces them
with the option ``fusion_rules``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from solvers.model.errors import InvalidOptions

DEFAULT_RULES: tuple[tuple[str, ...], ...] = (
    # MOIRAI Table I (Eigen on a GPU kernel)
    ("aten.convolution", "aten.batch_norm"),
    ("aten.convolution", "aten.batch_norm", "aten.relu"),
    ("aten.convolution", "aten.batch_norm", "aten.add", "aten.relu"),
    # GEMM epilogues: bias add and activation fused into the matrix multiply
    ("aten.mm", "aten.add"),
    ("aten.mm", "aten.add", "aten.gelu"),
    ("aten.mm", "aten.add", "aten.relu"),
    ("aten.addmm", "aten.gelu"),
    ("aten.addmm", "aten.relu"),
    # attention scores -> softmax, residual add -> layer norm
    ("aten.bmm", "aten._softmax"),
    ("aten.add", "aten.native_layer_norm"),
)

# spelling -> canonical name (after lower-casing and dropping the namespace / overload)
_ALIASES: dict[str, str] = {
    "convolution": "conv", "_convolution": "conv", "conv1d": "conv", "conv2d": "conv", "conv3d": "conv",
    "cudnn_convolution": "conv",
    "batch_norm": "bn", "batchnorm1d": "bn", "batchnorm2d": "bn", "batchnorm3d": "bn",
    "native_batch_norm": "bn", "_native_batch_norm_legit": "bn", "_native_batch_norm_legit_no_training": "bn",
    "relu_": "relu", "add_": "add", "linear": "addmm", "matmul": "mm", "softmax": "_softmax",
    "layer_norm": "native_layer_norm", "layernorm": "native_layer_norm",
}


def canonical_type(op: str) -> str:
    """Normalised operator type: ``aten.relu.default`` -> ``relu``, ``Conv2d(3, 64, ...)`` -> ``conv``."""
    name = op.split("(", 1)[0].strip().lower()
    parts = [p for p in name.split(".") if p]
    if len(parts) >= 2 and parts[0] in ("aten", "torch", "nn", "prims"):
        parts = parts[1:]
    base = parts[0] if parts else name
    return _ALIASES.get(base, base)


@dataclass(frozen=True)
class FusionRules:
    """A set of fusion rules; ``is_rule`` / ``is_sub_rule`` of Algorithm 1 on type sequences."""

    rules: tuple[tuple[str, ...], ...]

    @classmethod
    def parse(cls, raw: Sequence[Sequence[str]] | None) -> FusionRules:
        """Rules from a request (``None``: :data:`DEFAULT_RULES`); each needs >= 2 non-empty types."""
        if raw is None:
            raw = DEFAULT_RULES
        out = []
        for i, rule in enumerate(raw):
            if isinstance(rule, str) or len(rule) < 2:
                raise InvalidOptions(f"options.fusion_rules[{i}]: a rule lists at least two operator types",
                                     field=f"options.fusion_rules[{i}]")
            for j, op in enumerate(rule):
                if not isinstance(op, str) or not op.strip():
                    raise InvalidOptions(f"options.fusion_rules[{i}][{j}]: must be a non-empty operator type",
                                         field=f"options.fusion_rules[{i}][{j}]")
            out.append(tuple(canonical_type(op) for op in rule))
        return cls(tuple(out))

    @cached_property
    def _full(self) -> frozenset[tuple[str, ...]]:
        return frozenset(self.rules)

    @cached_property
    def _sub(self) -> frozenset[tuple[str, ...]]:
        subs = set()
        for rule in self.rules:
            for i in range(len(rule)):
                for j in range(i + 2, len(rule) + 1):
                    subs.add(rule[i:j])
        return frozenset(subs)

    def is_rule(self, types: tuple[str, ...]) -> bool:
        """``types`` is exactly one of the rules (Alg. 1, ``is_rule``)."""
        return types in self._full

    def is_sub_rule(self, types: tuple[str, ...]) -> bool:
        """``types`` is a contiguous part of a rule (Alg. 1, ``is_sub_rule``; Fig. 7's add, relu)."""
        return types in self._sub
