"""What a fresh fine-tuning run starts from: the query tower of `init_checkpoint`, and the
reader's BERT from the knowledge-augmented encoder of `reader_init` (default:
`init_checkpoint`) when it has one, as REALM does, or the whole reader of a warm-up
checkpoint; whatever they lack (or all, without them) starts from the model config's warm
start. Mixing the two gives the paper's ablations (REALM retriever + baseline encoder and
the reverse). A reader with an answer pointer takes it from the encoder's copy head
(`realm.model.networks.answer_pointer`).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import torch
from transformers import PreTrainedModel

from realm.model.networks.checkpoint import load_components
from realm.model.networks.config import ModelConfig, build_component
from realm.model.networks.reader import build_reader
from realm.model.networks.retriever import Embedder

log = logging.getLogger(__name__)

# `reader_init` value: the reader starts from the model config's warm start, whatever
# `init_checkpoint` holds (the ablations' "baseline encoder").
WARM_START = "warm-start"


def initial_components(
    init_checkpoint: str | None,
    model_config: ModelConfig,
    device: torch.device,
    reader_init: str | None = None,
    with_query_embedder: bool = True,
    reader_dropout: float | None = None,
    answer_pointer: bool = False,
    block_relevance: bool = False,
    span_features: bool = False,
    answer_type: bool = False,
    encoder_share: float = 1.0,
) -> dict[str, PreTrainedModel]:
    """reader (and query_embedder when `with_query_embedder`) of a fresh run (module
    docstring): a `reader_init` holding a reader (a warm-up's) gives the whole reader, span MLP
    included; one holding an encoder gives the reader's BERT and question-match vector, under
    a fresh span MLP. The reader's hidden states drop out at `reader_dropout` (None: the
    preset's dropout); its saved config keeps that rate, so a resumed run trains with it too.
    `answer_pointer`: the reader points from an answer slot, started from the encoder's copy
    head (a warm-up's reader must have one already). `block_relevance`: the reader scores each
    block as a whole (`Reader`), from zero; a warm-up's reader must have it already, and so
    with `span_features` (its span MLP reads each span's width and nearness to the question's words)
    and `answer_type` (each whole-entity span's type scored against the question).
    `encoder_share` < 1: the reader's BERT and question-match vector start that far along the
    line from the warm start (and its zero vector) to the encoder's; it acts on nothing else (a
    warm-up's whole reader, the warm start, an answer pointer's copy head)."""
    reader_config = dataclasses.replace(
        model_config, answer_pointer=answer_pointer, block_relevance=block_relevance, span_features=span_features,
        answer_type=answer_type,
    )
    if reader_dropout is not None:
        reader_config = dataclasses.replace(reader_config, hidden_dropout=reader_dropout)
    components: dict[str, PreTrainedModel] = {"reader": build_reader(reader_config)}
    reader_init = None if reader_init == WARM_START else reader_init or init_checkpoint
    if with_query_embedder:
        if init_checkpoint is None:
            components["query_embedder"] = build_component(Embedder, model_config)
        else:
            init = load_components(init_checkpoint)
            if "query_embedder" not in init:
                raise ValueError(f"{init_checkpoint}: no query_embedder to fine-tune")
            source = init["query_embedder"]
            # Depth, pooling and scale are the checkpoint's (a sentence-encoder start may be
            # deeper than the preset, and must embed questions as its doc tower embedded the
            # index); dropout and precision stay the preset's.
            tower_config = dataclasses.replace(
                model_config, num_layers=source.config.num_hidden_layers, retrieval_pooling=source.pooling,
                retrieval_scale=source.scale,
            )
            components["query_embedder"] = build_component(Embedder, tower_config)
            _load_into(components["query_embedder"], source, init_checkpoint, "query_embedder")
    if reader_init is not None:
        init = load_components(reader_init)
        if "reader" in init:
            _load_into(components["reader"], init["reader"], reader_init, "reader")
        elif "encoder" in init:
            # The question-match vector is zero unless pre-training flagged the masked sentence's words for it.
            for part in ("bert", "question_match"):
                _load_into(getattr(components["reader"], part), getattr(init["encoder"], part), reader_init, "encoder",
                           share=encoder_share)
            if answer_pointer:
                components["reader"].answer_pointer.start_from(init["encoder"].copy_head)
        else:
            log.info("%s has no encoder; the reader starts from %s", reader_init, model_config.model_dir or "random init")
    return {name: component.to(device) for name, component in components.items()}


def reader_starts_from_encoder(init_checkpoint: str | None, reader_init: str | None) -> bool:
    """Whether `initial_components` starts the reader's BERT from a pre-trained encoder (the
    only start `encoder_share` acts on)."""
    source = None if reader_init == WARM_START else reader_init or init_checkpoint
    return source is not None and (Path(source) / "encoder").is_dir()


def _load_into(target: torch.nn.Module, source: torch.nn.Module, checkpoint: str, name: str, share: float = 1.0) -> None:
    """`source`'s weights into `target`, or at `share` < 1 the point that far along the line
    from `target`'s own (its warm start) to them."""
    try:
        weights = source.state_dict()
        if share < 1:
            start = target.state_dict()
            # Integer buffers (none in BERT's state dict today) have no line between them: the encoder's.
            weights = {key: torch.lerp(start[key], value, share) if value.is_floating_point() else value
                       for key, value in weights.items()}
        target.load_state_dict(weights)
    except (RuntimeError, KeyError) as error:
        raise ValueError(f"{checkpoint}: {name} does not match the model config: {error}") from error
