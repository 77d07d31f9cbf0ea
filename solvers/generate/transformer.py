"""Op-level BERT / GPT transformer graphs with FLOP-derived times (docs/generators.md).

Per layer (``T`` = micro_batch x seq_len tokens, ``h`` hidden, ``f`` = ffn_mult x h, ``E`` bytes
per element): QKV projection (2·T·h·3h FLOPs), attention scores (2·T·s·h), softmax, attention x V
(2·T·s·h), output projection (2·T·h²), residual add, layer norm, FFN up (2·T·h·f), GELU,
FFN down (2·T·f·h), residual add, layer norm.  BERT (``causal=False``) is post-LN with module
paths ``encoder.layer.{i}.*``; GPT (``causal=True``) is pre-LN with ``transformer.h.{i}.*``.
``granularity="head"`` splits scores / softmax / attention x V per head (more parallel ops);
``"layer"`` merges each layer into one node.
"""

from __future__ import annotations

from solvers.generate._graph import CostParams, GraphBuilder
from solvers.generate._params import one_of, positive
from solvers.generate.devices import COMPUTE_EFFICIENCY, MEMORY_EFFICIENCY
from solvers.model.errors import InvalidInput
from solvers.model.graph import Node, OpGraph

GRANULARITIES = ("op", "head", "layer")


def _attention(b: GraphBuilder, x: str, p: str, t: int, s: int, h: int, heads: int, e: int, per_head: bool) -> str:
    """Self-attention core from the layer input ``x``; returns the context op (T x h)."""
    qkv = b.op(f"{p}.qkv", "aten.addmm", p, [x], out_bytes=3 * t * h * e, flops=2 * t * h * 3 * h,
               param_bytes=(3 * h * h + 3 * h) * e, matmul=True, bwd_factor=2.0)
    sq = t * s  # elements of one head's score matrix summed over the micro-batch: (T/s)·s·s
    if not per_head:
        scores = b.op(f"{p}.scores", "aten.bmm", p, [(qkv, 2 * t * h * e)], out_bytes=heads * sq * e,
                      flops=2 * t * s * h, matmul=True, bwd_factor=2.0)
        probs = b.op(f"{p}.softmax", "aten._softmax", p, [scores], out_bytes=heads * sq * e,
                     flops=5 * heads * sq)
        return b.op(f"{p}.context", "aten.bmm", p, [probs, (qkv, t * h * e)], out_bytes=t * h * e,
                    flops=2 * t * s * h, matmul=True, bwd_factor=2.0)
    d = h // heads
    ctx = []
    for k in range(heads):
        sc = b.op(f"{p}.scores.{k}", "aten.bmm", p, [(qkv, 2 * t * d * e)], out_bytes=sq * e,
                  flops=2 * t * s * d, matmul=True, bwd_factor=2.0)
        pr = b.op(f"{p}.softmax.{k}", "aten._softmax", p, [sc], out_bytes=sq * e, flops=5 * sq)
        ctx.append(b.op(f"{p}.context.{k}", "aten.bmm", p, [pr, (qkv, t * d * e)], out_bytes=t * d * e,
                        flops=2 * t * s * d, matmul=True, bwd_factor=2.0))
    return b.op(f"{p}.cat", "aten.cat", p, ctx, out_bytes=t * h * e)


def _layer_norm(b: GraphBuilder, node_id: str, layer: str, x: str, t: int, h: int, e: int) -> str:
    return b.op(node_id, "aten.native_layer_norm", layer, [x], out_bytes=t * h * e, flops=8 * t * h,
                param_bytes=2 * h * e)


def _block(b: GraphBuilder, x: str, i: int, dims: tuple[int, int, int, int, int, int], causal: bool,
           per_head: bool) -> str:
    """One transformer layer from input op ``x``; returns its output op."""
    t, s, h, heads, f, e = dims
    root = f"transformer.h.{i}" if causal else f"encoder.layer.{i}"
    att, mlp = (f"{root}.attn", f"{root}.mlp") if causal else (f"{root}.attention", f"{root}.intermediate")
    if causal:  # GPT: pre-LN
        ln1 = _layer_norm(b, f"{root}.ln_1", f"{root}.ln_1", x, t, h, e)
        ctx = _attention(b, ln1, att, t, s, h, heads, e, per_head)
    else:
        ctx = _attention(b, x, f"{att}.self", t, s, h, heads, e, per_head)
    proj_layer = att if causal else f"{att}.output"
    proj = b.op(f"{proj_layer}.dense", "aten.addmm", proj_layer, [ctx], out_bytes=t * h * e, flops=2 * t * h * h,
                param_bytes=(h * h + h) * e, matmul=True, bwd_factor=2.0)
    res1 = b.op(f"{proj_layer}.add", "aten.add", proj_layer, [proj, x], out_bytes=t * h * e, flops=t * h)
    mid = _layer_norm(b, f"{root}.ln_2", f"{root}.ln_2", res1, t, h, e) if causal else _layer_norm(
        b, f"{proj_layer}.LayerNorm", proj_layer, res1, t, h, e)
    up = b.op(f"{mlp}.fc_up", "aten.addmm", mlp, [mid], out_bytes=t * f * e, flops=2 * t * h * f,
              param_bytes=(h * f + f) * e, matmul=True, bwd_factor=2.0)
    act = b.op(f"{mlp}.gelu", "aten.gelu", mlp, [up], out_bytes=t * f * e, flops=8 * t * f)
    out_layer = mlp if causal else f"{root}.output"
    down = b.op(f"{out_layer}.fc_down", "aten.addmm", out_layer, [act], out_bytes=t * h * e, flops=2 * t * f * h,
                param_bytes=(f * h + h) * e, matmul=True, bwd_factor=2.0)
    res2 = b.op(f"{out_layer}.add", "aten.add", out_layer, [down, res1 if causal else mid],
                out_bytes=t * h * e, flops=t * h)
    return res2 if causal else _layer_norm(b, f"{out_layer}.LayerNorm", out_layer, res2, t, h, e)


def transformer(*, layers: int = 12, hidden: int = 768, heads: int = 12, seq_len: int = 512, micro_batch: int = 8,
                vocab: int = 30522, ffn_mult: int = 4, causal: bool = False, dtype_bytes: int = 2,
                device: str = "V100", granularity: str = "op", compute_efficiency: float = COMPUTE_EFFICIENCY,
                memory_efficiency: float = MEMORY_EFFICIENCY, op_overhead_s: float = 0.0,
                name: str = "") -> OpGraph:
    """BERT (post-LN) or GPT (causal, pre-LN) op graph with FLOP-derived times for a named device."""
    for pname, value in (("layers", layers), ("hidden", hidden), ("heads", heads), ("seq_len", seq_len),
                         ("micro_batch", micro_batch), ("vocab", vocab), ("ffn_mult", ffn_mult)):
        positive(value, pname)
    one_of(granularity, "granularity", GRANULARITIES)
    if hidden % heads:
        raise InvalidInput(f"parameter 'hidden' ({hidden}) must be a multiple of 'heads' ({heads})", field="hidden")
    b = GraphBuilder(CostParams(device, dtype_bytes, compute_efficiency, memory_efficiency, op_overhead_s))
    t, s, h, e = micro_batch * seq_len, seq_len, hidden, dtype_bytes
    dims = (t, s, h, heads, ffn_mult * hidden, e)
    emb = "transformer" if causal else "embeddings"
    tok = b.op(f"{emb}.wte" if causal else f"{emb}.word_embeddings", "aten.embedding", emb, [],
               out_bytes=t * h * e, param_bytes=vocab * h * e)
    pos = b.op(f"{emb}.wpe" if causal else f"{emb}.position_embeddings", "aten.embedding", emb, [],
               out_bytes=t * h * e, param_bytes=s * h * e)
    x = b.op(f"{emb}.add", "aten.add", emb, [tok, pos], out_bytes=t * h * e, flops=t * h)
    if not causal:
        x = _layer_norm(b, f"{emb}.LayerNorm", emb, x, t, h, e)
    for i in range(layers):
        x = _block(b, x, i, dims, causal, granularity == "head")
    head = "lm_head" if causal else "cls.predictions"
    if causal:
        x = _layer_norm(b, "transformer.ln_f", "transformer.ln_f", x, t, h, e)
    logits = b.op(f"{head}.decoder", "aten.mm", head, [x], out_bytes=t * vocab * e, flops=2 * t * h * vocab,
                  param_bytes=h * vocab * e, matmul=True, bwd_factor=2.0)
    logp = b.op(f"{head}.log_softmax", "aten._log_softmax", head, [logits], out_bytes=t * vocab * e,
                flops=5 * t * vocab)
    b.op("loss", "aten.nll_loss_forward", "loss", [logp], out_bytes=4, flops=t)
    kind = "gpt" if causal else "bert"
    attrs = {"generator": "transformer", "model": kind, "layers": layers, "hidden": hidden, "heads": heads,
             "seq_len": seq_len, "device": device, "dtype_bytes": dtype_bytes}
    return b.build(name or f"{kind}-{layers}x{hidden}", micro_batch, attrs, granularity, _layer_group)


def _layer_group(node: Node) -> str:
    """Coarsening key: the transformer layer (``encoder.layer.3``), else the module root."""
    parts = (node.layer or node.id).split(".")
    if len(parts) >= 3 and parts[0] in ("encoder", "transformer") and parts[2].isdigit():
        return ".".join(parts[:3])
    return parts[0] if parts[0] != "transformer" else ".".join(parts[:2])
