"""Which ops a tensor-parallel stage splits, and how: the rules as data (docs/tensor-parallel.md).

Megatron-LM's tensor parallelism (Shoeybi et al. 2019, §3) splits a transformer layer's two
blocks into a column-parallel linear followed by a row-parallel one: attention's QKV projections
(split by heads) then its output projection, and the MLP's up (and gate) projection then its down
projection.  Everything between the pair works on the local shard (attention per head, the MLP's
activation); the row-parallel output is all-reduced in the forward pass and the column-parallel
input gradient in the backward pass (§3, Fig. 3, the ``f``/``g`` operators).  The input embedding and
the LM head split the vocabulary (§3, "input embedding ... parallelized along the vocabulary
dimension").  Sequence parallelism (Korthikanti et al. 2022, §4.2.2) also splits the norms and
dropouts outside the pairs along the sequence, turning each all-reduce into a reduce-scatter and an
all-gather.  An op no rule matches runs replicated on every device of the group.

:data:`SPLIT_RULES` match an op by its module path (``Node.layer``, e.g.
``transformer.h.0.attn.c_attn``), its target (``Node.op``, e.g. ``aten.addmm.default``) and its
module type (``attrs.module``), as ``placer extract`` writes them; the first matching rule wins.
:func:`split_layout` then pairs columns with rows through the graph: the ops on a path from a
column-parallel op to a row-parallel op are ``sharded``; a column or row with no partner stays
replicated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

import numpy as np

from solvers.arrays import FloatArray
from solvers.model.graph import OpGraph

COLUMN = "column"  # column-parallel linear: weight split along its outputs, input replicated
ROW = "row"  # row-parallel linear: weight split along its inputs, output all-reduced
SHARDED = "sharded"  # between a column and its row: works on the local shard (heads, MLP width)
VOCAB_EMBEDDING = "vocab_embedding"  # embedding table split by vocabulary rows, output all-reduced
VOCAB_HEAD = "vocab_head"  # LM head split by vocabulary columns, input gradient all-reduced
SEQUENCE = "sequence"  # norm or dropout: split along the sequence with sequence parallelism only
REPLICATED = "replicated"  # no rule: every device of the group runs the whole op

SPLIT_KINDS: tuple[str, ...] = (COLUMN, ROW, SHARDED, VOCAB_EMBEDDING, VOCAB_HEAD, SEQUENCE, REPLICATED)

_MATMUL = r"^aten\.(linear|addmm|mm|matmul)(\.|$)"


@dataclass(frozen=True)
class SplitRule:
    """One rule: an op whose module path, target and module type match takes ``kind``.

    ``layer``, ``op`` and ``module`` are regular expressions searched (``re.search``) in the op's
    ``layer``, ``op`` and ``attrs.module``; an op without a layer or module type matches only a
    rule whose pattern matches the empty string.
    """

    name: str
    kind: str
    layer: str
    op: str
    module: str
    source: str


SPLIT_RULES: tuple[SplitRule, ...] = (
    SplitRule("attention-qkv", COLUMN,
              r"(^|\.)(c_attn|q_proj|k_proj|v_proj|qkv_proj|query|key|value|query_key_value|Wqkv)$"
              r"|(SelfAttention|EncDecAttention)\.[qkv]$", _MATMUL, "", "Shoeybi et al. 2019, §3 (self-attention)"),
    SplitRule("attention-output", ROW,
              r"(^|\.)(attn\.c_proj|o_proj|out_proj|attention\.output\.dense|dense_out)$"
              r"|(SelfAttention|EncDecAttention)\.o$", _MATMUL, "", "Shoeybi et al. 2019, §3 (self-attention)"),
    SplitRule("mlp-up", COLUMN,
              r"(^|\.)(mlp\.c_fc|gate_proj|up_proj|intermediate\.dense|wi|wi_0|wi_1|fc1|w1|w3|dense_h_to_4h)$",
              _MATMUL, "", "Shoeybi et al. 2019, §3 (MLP)"),
    SplitRule("mlp-down", ROW,
              r"(^|\.)(mlp\.c_proj|down_proj|output\.dense|wo|fc2|w2|dense_4h_to_h)$",
              _MATMUL, "", "Shoeybi et al. 2019, §3 (MLP)"),
    SplitRule("vocab-embedding", VOCAB_EMBEDDING,
              r"(^|\.)(wte|word_embeddings|embed_tokens|tok_embeddings|shared)$", r"^aten\.embedding(\.|$)", "",
              "Shoeybi et al. 2019, §3 (input embedding)"),
    SplitRule("lm-head", VOCAB_HEAD, r"(^|\.)(lm_head|embed_out)$", _MATMUL, "",
              "Shoeybi et al. 2019, §3 (output embedding)"),
    SplitRule("norm", SEQUENCE, "", "", r"(LayerNorm|RMSNorm|GroupNorm)$",
              "Korthikanti et al. 2022, §4.2.2"),
    SplitRule("dropout", SEQUENCE, "", r"^aten\.(dropout|native_dropout)(\.|$)", "",
              "Korthikanti et al. 2022, §4.2.2"),
)


@cache
def _compiled(rule: SplitRule) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    return re.compile(rule.layer), re.compile(rule.op), re.compile(rule.module)


def rule_kind(layer: str | None, op: str, module: str | None, rules: tuple[SplitRule, ...] = SPLIT_RULES) -> str:
    """The kind of the first rule matching an op (``replicated`` when none does)."""
    for rule in rules:
        lay, tgt, mod = _compiled(rule)
        if lay.search(layer or "") and tgt.search(op) and mod.search(module or ""):
            return rule.kind
    return REPLICATED


@dataclass(frozen=True, eq=False)
class SplitLayout:
    """How each op of a graph splits in a tensor-parallel group, and the bytes its collectives move.

    ``kinds[v]``: one of :data:`SPLIT_KINDS`.  ``output_reduce_bytes[v]``: bytes of the output a row
    or vocabulary embedding op sums across the group (all-reduce in the forward pass, or
    reduce-scatter forward and all-gather backward with sequence parallelism).
    ``input_gather_bytes[v]``: bytes of the replicated inputs a column or LM-head op reads, counted
    once per input tensor and column/row pair (its gradient is all-reduced in the backward pass, or
    all-gathered forward and reduce-scattered backward with sequence parallelism).
    """

    kinds: tuple[str, ...]
    output_reduce_bytes: FloatArray
    input_gather_bytes: FloatArray

    def split_mask(self, sequence_parallel: bool) -> np.ndarray:
        """Per op: whether a group of ``t`` devices runs it in ``1/t`` (sequence kinds only with
        sequence parallelism)."""
        split = {COLUMN, ROW, SHARDED, VOCAB_EMBEDDING, VOCAB_HEAD} | ({SEQUENCE} if sequence_parallel else set())
        return np.fromiter((k in split for k in self.kinds), dtype=bool, count=len(self.kinds))


def split_layout(graph: OpGraph, rules: tuple[SplitRule, ...] = SPLIT_RULES) -> SplitLayout:
    """Annotate every op of ``graph`` with its split kind (module doc) and its collectives' bytes."""
    n = graph.n_ops
    kinds = [rule_kind(node.layer, node.op, (node.attrs or {}).get("module"), rules) for node in graph.nodes]
    succ, pred = graph.succ, graph.pred
    after_column = _reach([v for v in range(n) if kinds[v] == COLUMN], succ, stop={ROW}, kinds=kinds)
    before_row = _reach([v for v in range(n) if kinds[v] == ROW], pred, stop={COLUMN}, kinds=kinds)
    inside = after_column & before_row  # ops on a column -> row path, the pair's ends included
    region = _regions(graph, inside, kinds)
    paired = {r for r in set(region.values())
              if any(kinds[v] == COLUMN for v, q in region.items() if q == r)
              and any(kinds[v] == ROW for v, q in region.items() if q == r)}
    for v in range(n):
        if v in region and region[v] in paired:
            if kinds[v] not in (COLUMN, ROW):
                kinds[v] = SHARDED
        elif kinds[v] in (COLUMN, ROW):
            kinds[v] = REPLICATED  # no partner: it would need a gather Megatron's pairs avoid
    reduce_out = np.zeros(n)
    gather_in = np.zeros(n)
    size, src = graph.edge_bytes, graph.edge_src
    first: dict[tuple[int, int], tuple[int, float]] = {}  # (producer, pair) -> (column counting it, bytes)
    for v in range(n):
        if kinds[v] in (ROW, VOCAB_EMBEDDING):
            out = [float(size[e]) for e in graph.out_edges[v]]
            reduce_out[v] = max(out) if out else float(graph.act_bytes[v])
        elif kinds[v] in (COLUMN, VOCAB_HEAD):
            for e in graph.in_edges[v]:
                key = (int(src[e]), region.get(v, -1 - v))
                owner, nbytes = first.get(key, (v, 0.0))
                first[key] = (owner, max(nbytes, float(size[e])))
    for owner, nbytes in first.values():
        gather_in[owner] += nbytes
    return SplitLayout(tuple(kinds), reduce_out, gather_in)


def _reach(starts: list[int], adjacent: list[list[int]], *, stop: set[str], kinds: list[str]) -> set[int]:
    """Ops reachable from ``starts`` along ``adjacent``, not going past an op whose kind is in ``stop``."""
    seen = set(starts)
    todo = list(starts)
    while todo:
        v = todo.pop()
        for w in adjacent[v]:
            if w not in seen:
                seen.add(w)
                if kinds[w] not in stop:
                    todo.append(w)
    return seen


def _regions(graph: OpGraph, inside: set[int], kinds: list[str]) -> dict[int, int]:
    """Connected components of the ops in ``inside`` (one per column/row pair), joined by the edges
    that stay inside a pair (not leaving a row, not entering a column)."""
    parent = {v: v for v in inside}

    def find(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for u, w in zip(graph.edge_src.tolist(), graph.edge_dst.tolist(), strict=True):
        if u in inside and w in inside and kinds[u] != ROW and kinds[w] != COLUMN:
            parent[find(u)] = find(w)
    return {v: find(v) for v in inside}
