"""What a fresh fine-tuning run starts from: the query tower of `init_checkpoint`, and the
reader's BERT from the knowledge-augmented encoder of `reader_init` (default:
`init_checkpoint`) when it has one, as REALM does, or the whole reader of a warm-up
checkpoint; whatever they lack (or all, without them) starts from the model config's warm
start. Mixing the two gives the paper's ablations (REALM retriever + baseline encoder and
the reverse).
"""

from __future__ import annotations

import dataclasses
import logging

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
    span_features: bool = True,
) -> dict[str, PreTrainedModel]:
    """reader (and query_embedder when `with_query_embedder`) of a fresh run (module
    docstring): a `reader_init` holding a reader (a warm-up's) gives the whole reader, span MLP
    included; one holding an encoder gives the reader's BERT, under a fresh span MLP. The
    reader's hidden states drop out at `reader_dropout` (None: the preset's dropout); its saved
    config keeps that rate, so a resumed run trains with it too. `span_features`: the reader's
    span MLP reads each span's width and nearness to the question's words; a warm-up's reader
    must have them already."""
    reader_config = dataclasses.replace(model_config, span_features=span_features)
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
            _load_into(components["reader"].bert, init["encoder"].bert, reader_init, "encoder")
        else:
            log.info("%s has no encoder; the reader starts from %s", reader_init, model_config.model_dir or "random init")
    return {name: component.to(device) for name, component in components.items()}


def _load_into(target: torch.nn.Module, source: torch.nn.Module, checkpoint: str, name: str) -> None:
    try:
        target.load_state_dict(source.state_dict())
    except (RuntimeError, KeyError) as error:
        raise ValueError(f"{checkpoint}: {name} does not match the model config: {error}") from error
