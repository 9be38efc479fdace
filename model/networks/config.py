"""Model configuration: one frozen dataclass, named presets, and the warm-start loader.

Every component (query/doc embedder, knowledge-augmented encoder, reader) is a BERT built
from the same `ModelConfig`: warm-started from a local Hugging Face BERT directory, or
randomly initialised from the shape fields when `model_dir` is None (the `random-2l` preset).
Nothing here downloads; loading uses `local_files_only=True`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar, get_args

import torch
import transformers
from transformers import BertConfig, PreTrainedModel

from realm.model.networks.presets import ModelPreset, current_model_preset
from realm.model.tokenization import WordPieceTokenizer, default_model_dir, load_tokenizer
from realm.schemas import EMBEDDING_DIM

log = logging.getLogger(__name__)

ComponentT = TypeVar("ComponentT", bound=PreTrainedModel)


@dataclass(frozen=True)
class ModelConfig:
    """What to build. Pass it explicitly; presets are starting points (`ModelConfig.preset`).

    `model_dir`: local HF BERT directory to warm-start from (None: random init with the shape
    fields below). `num_layers`: keep only the first N transformer layers (None: all of the
    warm start's layers; required for random init). `dropout` sets hidden and attention
    dropout; `hidden_dropout`, when set, the hidden states' alone (attention dropout forces
    the slow attention path on a CPU: `bench/reader_dropout.py`). `cpu_bf16_autocast`: run
    forward passes under bf16 autocast on CPU too (on CUDA bf16 autocast is always on where
    the GPU supports it). `retrieval_pooling`: what a
    retriever tower projects, the final [CLS] state or the mean of its tokens' states.
    `retrieval_scale`: None scores blocks by the inner product of the towers' projections
    (REALM's f(x,z)); a number s scales each projection to length √s, so f(x,z) = s · cos.
    `span_features`: the reader's span MLP also reads each span's width and nearness to the
    question's words (`realm.model.networks.span_features`).
    """

    model_dir: str | None
    num_layers: int | None = None
    dropout: float = 0.1
    hidden_dropout: float | None = None
    cpu_bf16_autocast: bool = False
    retrieval_dim: int = EMBEDDING_DIM
    retrieval_pooling: Literal["cls", "mean"] = "cls"
    retrieval_scale: float | None = None
    span_hidden_size: int = 256
    max_span_wordpieces: int = 10
    span_features: bool = True
    # Shape of a randomly initialised BERT (ignored when warm-starting from model_dir).
    hidden_size: int = 128
    num_attention_heads: int = 2
    intermediate_size: int = 512
    vocab_size: int = 30522

    @classmethod
    def preset(cls, name: str, bert_dir: str | None = None, **overrides) -> ModelConfig:
        """A named preset (see `PRESETS`; an old name too, `presets.OLD_MODEL_PRESET_NAMES`), with any
        field overridden. A `model_dir` given here is used as given: the MiniLM package is looked
        up only when none is, so a machine without it builds the preset from a copy of its weights.
        `bert_dir`: the BERT a run starts from (`realm run --bert DIR`, recorded in its run.json),
        None for the preset's own; every preset warm-starts from it, `random-2l` its first 2 layers."""
        name = current_model_preset(name)
        if name not in PRESETS:
            raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
        if bert_dir is not None:
            overrides = {"model_dir": bert_dir, **overrides}
        return dataclasses.replace(PRESETS[name](overrides.get("model_dir")), **overrides)

    def bert_config(self) -> BertConfig:
        """The BertConfig every component is built with, including the realm-specific fields."""
        hidden = self.dropout if self.hidden_dropout is None else self.hidden_dropout
        dropout = {"hidden_dropout_prob": hidden, "attention_probs_dropout_prob": self.dropout}
        if self.model_dir is not None:
            config = BertConfig.from_pretrained(self.model_dir, local_files_only=True, **dropout)
            if self.num_layers is not None:
                if self.num_layers > config.num_hidden_layers:
                    raise ValueError(
                        f"{self.model_dir}: has {config.num_hidden_layers} layers, "
                        f"cannot keep {self.num_layers}"
                    )
                config.num_hidden_layers = self.num_layers
        else:
            if self.num_layers is None:
                raise ValueError("a randomly initialised model needs num_layers")
            config = BertConfig(
                vocab_size=self.vocab_size,
                hidden_size=self.hidden_size,
                num_hidden_layers=self.num_layers,
                num_attention_heads=self.num_attention_heads,
                intermediate_size=self.intermediate_size,
                **dropout,
            )
        config.retrieval_dim = self.retrieval_dim
        config.retrieval_pooling = self.retrieval_pooling
        config.retrieval_scale = self.retrieval_scale
        config.span_hidden_size = self.span_hidden_size
        config.max_span_wordpieces = self.max_span_wordpieces
        config.span_features = self.span_features
        return config

    def tokenizer(self) -> WordPieceTokenizer:
        """The WordPiece vocabulary of the warm start (random init shares the default vocab)."""
        return load_tokenizer(self.model_dir)


def _warm_start_dir(model_dir: str | None) -> str:
    return model_dir or str(default_model_dir())


def _random_2l(model_dir: str | None) -> ModelConfig:
    """Tests: 2 layers, hidden 128, 2 heads, random init, default vocab; dropout on, so tests
    that depend on RNG state (exact resume) exercise it."""
    return ModelConfig(model_dir=model_dir, num_layers=2, dropout=0.1)


def _bf16_6l(model_dir: str | None) -> ModelConfig:
    """The local 6-layer MiniLM BERT, dropout 0, bf16 autocast on CPU.

    Trade: faster steps than `fp32-6l` on a CPU (no dropout masks, no slow attention path,
    bf16 matmuls) for no dropout regularisation and bf16 rounding in the forward pass.
    """
    return ModelConfig(model_dir=_warm_start_dir(model_dir), dropout=0.0, cpu_bf16_autocast=True)


def _bf16_2l(model_dir: str | None) -> ModelConfig:
    """The first 2 layers of the local BERT, dropout 0, bf16 autocast on CPU.

    Trade: faster again than `bf16-6l`, for a much shallower encoder and retriever.
    """
    return ModelConfig(model_dir=_warm_start_dir(model_dir), num_layers=2, dropout=0.0, cpu_bf16_autocast=True)


def _fp32_6l(model_dir: str | None) -> ModelConfig:
    """The paper's regularisation and precision (dropout 0.1, fp32) on the local 6-layer BERT.

    Trade: fidelity for speed.
    """
    return ModelConfig(model_dir=_warm_start_dir(model_dir), dropout=0.1, cpu_bf16_autocast=False)


# Each preset's builder is `_<its name, dashes as underscores>`.
PRESETS: dict[str, Callable[[str | None], ModelConfig]] = {
    name: globals()["_" + name.replace("-", "_")] for name in get_args(ModelPreset)
}


def load_pretrained(component_cls: type[ComponentT], path: str | os.PathLike, **kwargs) -> ComponentT:
    """`component_cls.from_pretrained(path)` held in float32 whatever dtype its files hold.
    transformers 5 loads a model in its files' dtype by default: a float16 copy of the warm
    start then trained with float16 weights, where AdamW's updates at fine-tuning's rates are
    mostly below float16's resolution. Reduced precision is the forward's (autocast), not the
    weights'."""
    return component_cls.from_pretrained(path, dtype=torch.float32, **kwargs)


def build_component(component_cls: type[ComponentT], config: ModelConfig) -> ComponentT:
    """A fresh component: warm-started from `config.model_dir`, or randomly initialised.

    Weights the warm start lacks (projection, MLM head, span scorer) are freshly initialised
    and logged, since that changes what a run starts from.
    """
    bert_config = config.bert_config()
    if config.model_dir is None:
        model = component_cls(bert_config)
    else:
        model, info = load_pretrained(
            component_cls,
            config.model_dir,
            config=bert_config,
            local_files_only=True,
            attn_implementation="sdpa",
            output_loading_info=True,
        )
        _log_heads(model, config.model_dir, info["missing_keys"])
    return model


def _log_heads(model: PreTrainedModel, model_dir: str, missing_keys) -> None:
    """One line naming the heads (modules beside the BERT body) the warm start held and those it
    lacked, freshly initialised: what a run starts from (a BertForMaskedLM's MLM head, or none)."""

    def head(key: str) -> str:
        # "cls.predictions.transform.dense.weight" -> "cls.predictions": name heads, not tensors.
        return ".".join(key.split(".")[:-1][:2])

    body = model.base_model_prefix + "."
    fresh = {head(key) for key in missing_keys if not key.startswith(body)}
    loaded = {head(key) for key in model.state_dict() if not key.startswith(body)} - fresh
    body_fresh = sorted({head(key) for key in missing_keys if key.startswith(body)})
    log.info(
        "%s: from %s, loaded %s; freshly initialised: %s",
        type(model).__name__, model_dir, ", ".join(["the BERT body", *sorted(loaded)]),
        ", ".join(body_fresh + sorted(fresh)) or "nothing",
    )


def set_transformers_verbosity_error() -> None:
    """Silence transformers' per-load warnings and progress bars (missing heads are logged by
    `build_component` in one line instead)."""
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
