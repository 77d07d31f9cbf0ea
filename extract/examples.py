"""Built-in example models: transformers config classes with random weights, no download.

``--example NAME --param key=value ...``; every example takes ``dtype`` (float32, bfloat16,
float16) besides the sizes below, and the transformer examples ``dropout`` (every dropout
probability of the config; ``dropout=0`` gives a deterministic model that a pipelined step can be
compared with exactly).  Defaults are the published base sizes (BERT-Base, GPT-2
small, a 7B-shaped Llama cut to 2 layers, T5-small, ViT-B/16, ResNet-50, Swin-T).  The weights are
drawn by the transformers initialisers after ``torch.manual_seed(seed)``, so the same parameters
give the same model on every rank.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from extract.source import DTYPES, InputSpec
from solvers.model.errors import InvalidInput

ParamValue = int | float | str | tuple[int, ...]


@dataclass(frozen=True)
class Example:
    """A built-in model: default parameters and a builder ``params -> (module, inputs)``."""

    name: str
    summary: str
    defaults: Mapping[str, ParamValue]
    build: Callable[[Mapping[str, Any]], tuple[torch.nn.Module, list[InputSpec]]]


def _ids(p: Mapping[str, Any], name: str = "input_ids") -> InputSpec:
    return InputSpec(name, (1, int(p["seq"])), "int64")


def _pixels(p: Mapping[str, Any]) -> InputSpec:
    return InputSpec("pixel_values", (1, 3, int(p["image"]), int(p["image"])), p["dtype"])


def _bert(p: Mapping[str, Any]) -> tuple[torch.nn.Module, list[InputSpec]]:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=p["vocab"], hidden_size=p["hidden"], num_hidden_layers=p["layers"],
                     num_attention_heads=p["heads"], intermediate_size=p["intermediate"] or 4 * p["hidden"],
                     max_position_embeddings=max(512, p["seq"]), hidden_dropout_prob=p["dropout"],
                     attention_probs_dropout_prob=p["dropout"])
    return BertModel(cfg), [_ids(p)]


def _gpt2(p: Mapping[str, Any]) -> tuple[torch.nn.Module, list[InputSpec]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=p["vocab"], n_embd=p["hidden"], n_layer=p["layers"], n_head=p["heads"],
                     n_inner=p["intermediate"] or None, n_positions=max(1024, p["seq"]), use_cache=False,
                     resid_pdrop=p["dropout"], embd_pdrop=p["dropout"], attn_pdrop=p["dropout"],
                     bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg), [_ids(p)]


def _llama(p: Mapping[str, Any]) -> tuple[torch.nn.Module, list[InputSpec]]:
    from transformers import LlamaConfig, LlamaModel

    cfg = LlamaConfig(vocab_size=p["vocab"], hidden_size=p["hidden"], num_hidden_layers=p["layers"],
                      num_attention_heads=p["heads"], num_key_value_heads=p["heads"],
                      intermediate_size=p["intermediate"] or 4 * p["hidden"],
                      max_position_embeddings=max(2048, p["seq"]), use_cache=False, attention_dropout=p["dropout"],
                      bos_token_id=0, eos_token_id=0, pad_token_id=0)
    return LlamaModel(cfg), [_ids(p)]


def _t5(p: Mapping[str, Any]) -> tuple[torch.nn.Module, list[InputSpec]]:
    from transformers import T5Config, T5Model

    cfg = T5Config(vocab_size=p["vocab"], d_model=p["hidden"], num_layers=p["layers"], num_heads=p["heads"],
                   d_kv=p["hidden"] // p["heads"], d_ff=p["intermediate"] or 4 * p["hidden"], use_cache=False,
                   dropout_rate=p["dropout"],
                   decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)  # type: ignore[call-arg]
    return T5Model(cfg), [_ids(p), _ids(p, "decoder_input_ids")]


def _vit(p: Mapping[str, Any]) -> tuple[torch.nn.Module, list[InputSpec]]:
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(hidden_size=p["hidden"], num_hidden_layers=p["layers"], num_attention_heads=p["heads"],
                    intermediate_size=p["intermediate"] or 4 * p["hidden"], image_size=p["image"],
                    patch_size=p["patch"], hidden_dropout_prob=p["dropout"], attention_probs_dropout_prob=p["dropout"])
    return ViTModel(cfg), [_pixels(p)]


def _resnet(p: Mapping[str, Any]) -> tuple[torch.nn.Module, list[InputSpec]]:
    from transformers import ResNetConfig, ResNetModel

    depths = list(p["depths"])
    cfg = ResNetConfig(embedding_size=p["hidden"], depths=depths, layer_type="bottleneck",
                       hidden_sizes=[p["hidden"] * 4 * 2**i for i in range(len(depths))])
    return ResNetModel(cfg), [_pixels(p)]


def _swin(p: Mapping[str, Any]) -> tuple[torch.nn.Module, list[InputSpec]]:
    from transformers import SwinConfig, SwinModel

    depths, heads = list(p["depths"]), list(p["heads"])
    if len(depths) != len(heads):
        raise InvalidInput(f"--param depths and heads need the same length, got {depths} and {heads}", field="param")
    cfg = SwinConfig(image_size=p["image"], patch_size=p["patch"], embed_dim=p["hidden"], depths=depths,
                     num_heads=heads, window_size=p["window"], drop_path_rate=p["dropout"])
    return SwinModel(cfg), [_pixels(p)]


_TEXT: dict[str, ParamValue] = {"layers": 12, "hidden": 768, "heads": 12, "intermediate": 0, "seq": 512,
                                "vocab": 30522, "dropout": 0.1, "dtype": "float32"}
EXAMPLES: dict[str, Example] = {e.name: e for e in (
    Example("bert", "BertModel (BERT-Base)", _TEXT, _bert),
    Example("gpt2", "GPT2LMHeadModel, use_cache=False (GPT-2 small; tied embedding)",
            {**_TEXT, "seq": 1024, "vocab": 50257}, _gpt2),
    Example("llama", "LlamaModel (Llama-2-7B layer shape, 2 layers)",
            {**_TEXT, "layers": 2, "hidden": 4096, "heads": 32, "intermediate": 11008, "seq": 512, "vocab": 32000,
             "dropout": 0.0},
            _llama),
    Example("t5", "T5Model encoder-decoder (T5-small)",
            {**_TEXT, "layers": 6, "hidden": 512, "heads": 8, "intermediate": 2048, "vocab": 32128}, _t5),
    Example("vit", "ViTModel (ViT-B/16)", {"layers": 12, "hidden": 768, "heads": 12, "intermediate": 0,
                                            "image": 224, "patch": 16, "dropout": 0.0, "dtype": "float32"}, _vit),
    Example("resnet", "ResNetModel, bottleneck blocks (ResNet-50)",
            {"depths": (3, 4, 6, 3), "hidden": 64, "image": 224, "dtype": "float32"}, _resnet),
    Example("swin", "SwinModel (Swin-T)", {"depths": (2, 2, 6, 2), "heads": (3, 6, 12, 24), "hidden": 96,
                                          "image": 224, "patch": 4, "window": 7, "dropout": 0.1,
                                          "dtype": "float32"}, _swin),
)}


def example_params(name: str, given: Mapping[str, Any]) -> dict[str, ParamValue]:
    """The example's full parameters: defaults overridden by ``given`` (text or typed values)."""
    example = _example(name)
    params = dict(example.defaults)
    for key, raw in given.items():
        if key not in params:
            raise InvalidInput(f"--param {key}: unknown for example {name!r} (valid: {', '.join(params)})",
                               field="param", ref=key)
        params[key] = _convert(key, raw, params[key])
    if params.get("dtype") not in DTYPES or not DTYPES[str(params["dtype"])].is_floating_point:
        raise InvalidInput(f"--param dtype: expected float32, bfloat16 or float16, got {params.get('dtype')!r}",
                           field="param", ref="dtype")
    return params


def build_example(name: str, params: Mapping[str, ParamValue]) -> tuple[torch.nn.Module, list[InputSpec]]:
    """The example's module (random weights, current device and RNG) and input specs (batch 1)."""
    module, inputs = _example(name).build(params)
    return module.to(DTYPES[str(params["dtype"])]), inputs


def _example(name: str) -> Example:
    if name not in EXAMPLES:
        raise InvalidInput(f"--example {name!r}: unknown (valid: {', '.join(EXAMPLES)})", field="example", ref=name)
    return EXAMPLES[name]


def _convert(key: str, raw: Any, default: ParamValue) -> ParamValue:
    try:
        if isinstance(default, tuple):
            values = raw if isinstance(raw, list | tuple) else str(raw).split(",")
            return tuple(int(x) for x in values)
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
    except ValueError:
        raise InvalidInput(f"--param {key}={raw!r}: expected {type(default).__name__}", field="param",
                           ref=key) from None
    return str(raw)
