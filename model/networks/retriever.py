"""The neural knowledge retriever: two BERT towers whose pooled final states are projected to 128-d.

f(x,z) = Embed_input(x)ᵀ Embed_doc(z) (REALM §3.2). The query tower reads `[CLS] x [SEP]`,
the doc tower `[CLS] title [SEP] body [SEP]`; they are separate encoders. With the doc tower
frozen (fine-tuning, cached pre-training) `embed_passages` runs it under `torch.no_grad()`.

A tower pools the final [CLS] state (REALM's choice) or, with `retrieval_pooling = "mean"`,
the mean over its real tokens: the pooling the MiniLM sentence encoder was trained with, so
its retrieval geometry survives the warm start. `fit_projection_pca` then sets the 128-d
projection to the top principal directions of pooled block vectors (centred), where a random
projection would scramble that geometry. The sentence encoder was also trained on cosine
similarity (scaled by 20 in its softmax): with `retrieval_scale` each tower's projection is
scaled to length √s, so the inner product the index searches is s · cos and a block's
vector length no longer counts in its score.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import BertConfig, BertModel, BertPreTrainedModel

from realm.model.networks.config import ModelConfig, build_component
from realm.model.networks.inputs import BertInputs


class Embedder(BertPreTrainedModel):
    """One tower: BERT, then a linear projection of the pooled final states to `retrieval_dim`."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.projection = nn.Linear(config.hidden_size, config.retrieval_dim)
        self.post_init()

    @property
    def pooling(self) -> str:
        # Checkpoints written before the option existed pooled [CLS].
        return getattr(self.config, "retrieval_pooling", "cls")

    @property
    def scale(self) -> float | None:
        # Checkpoints written before the option existed scored by the plain inner product.
        return getattr(self.config, "retrieval_scale", None)

    def pooled(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        """[n, hidden]: the final [CLS] state, or the mean of the real tokens' final states."""
        hidden = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state  # [n, length, hidden]
        if self.pooling == "mean":
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # [n, length, 1]
            return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        return hidden[:, 0]

    def project(self, pooled: torch.Tensor) -> torch.Tensor:
        """[n, retrieval_dim] from pooled final states [n, hidden]: the tower's output."""
        projected = self.projection(pooled)
        if self.scale is None:
            return projected
        return nn.functional.normalize(projected.float(), dim=-1) * math.sqrt(self.scale)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> torch.Tensor:
        return self.project(self.pooled(input_ids, attention_mask, token_type_ids))


class Retriever(nn.Module):
    """Query tower + doc tower. `freeze_doc_tower` stops gradients into the doc tower."""

    def __init__(self, query_embedder: Embedder, doc_embedder: Embedder, freeze_doc_tower: bool = False):
        super().__init__()
        self.query_embedder = query_embedder
        self.doc_embedder = doc_embedder
        self.freeze_doc_tower = freeze_doc_tower

    @property
    def freeze_doc_tower(self) -> bool:
        return self._freeze_doc_tower

    @freeze_doc_tower.setter
    def freeze_doc_tower(self, frozen: bool) -> None:
        # requires_grad too, so no gradient is computed for the tower (the optimizer, which
        # holds every parameter, then leaves it where it is).
        self._freeze_doc_tower = frozen
        self.doc_embedder.requires_grad_(not frozen)

    def embed_queries(self, queries: BertInputs) -> torch.Tensor:
        """[n, retrieval_dim] Embed_input(x), float32."""
        return self.query_embedder(**queries.as_kwargs()).float()

    def embed_passages(self, passages: BertInputs) -> torch.Tensor:
        """[n, retrieval_dim] Embed_doc(z), float32; no graph when the doc tower is frozen."""
        if self.freeze_doc_tower:
            with torch.no_grad():
                return self.doc_embedder(**passages.as_kwargs()).float()
        return self.doc_embedder(**passages.as_kwargs()).float()


def relevance_scores(query_embeddings: torch.Tensor, doc_embeddings: torch.Tensor) -> torch.Tensor:
    """f(x,z) for each query's own candidates: [batch, d] · [batch, k, d] -> [batch, k]."""
    return torch.einsum("bd,bkd->bk", query_embeddings, doc_embeddings)


@torch.no_grad()
def fit_projection_pca(embedders: list[Embedder], pooled_vectors: torch.Tensor) -> None:
    """Set each tower's projection to x -> Wᵀ(x − μ), W the top `retrieval_dim` principal
    directions of `pooled_vectors` [n, hidden] (pooled block states). Inner products of the
    projections then approximate those of the centred pooled vectors; centring removes the
    mean direction every sentence-encoder vector shares, which otherwise dominates the scores."""
    pooled_vectors = pooled_vectors.float()
    mean = pooled_vectors.mean(dim=0)  # [hidden]
    dim = embedders[0].projection.out_features
    if dim > pooled_vectors.shape[1]:
        raise ValueError(f"PCA cannot project {pooled_vectors.shape[1]}-d pooled vectors to {dim} dimensions")
    if len(pooled_vectors) < dim:
        raise ValueError(f"PCA to {dim} dimensions needs >= {dim} vectors, got {len(pooled_vectors)}")
    _, _, components = torch.linalg.svd(pooled_vectors - mean, full_matrices=False)  # [min(n, hidden), hidden]
    weight = components[:dim]  # [dim, hidden]
    for embedder in embedders:
        embedder.projection.weight.copy_(weight)
        embedder.projection.bias.copy_(-weight @ mean)


def build_retriever(config: ModelConfig, freeze_doc_tower: bool = False) -> Retriever:
    """Both towers from the same warm start (REALM initialises them alike, then they diverge)."""
    return Retriever(
        build_component(Embedder, config), build_component(Embedder, config), freeze_doc_tower
    )
