"""The model ``bench.bench_launcher`` profiles, solves and runs: a 4-layer BERT (hidden 256, seq 64)
without dropout, so that one CPU thread spends milliseconds per layer."""

from __future__ import annotations

import torch


def bert(batch: int = 8) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=512, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                     intermediate_size=1024, max_position_embeddings=64, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    ids = torch.randint(0, 512, (batch, 64), generator=torch.Generator().manual_seed(1))
    return BertModel(cfg), {"input_ids": ids}
