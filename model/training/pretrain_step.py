"""One REALM pre-training step in pieces: mask the query, retrieve, score candidates, read, marginalise.

The pieces are separate so the trainer (and `bench/pretrain_step.py`) can time and mix
them: `retrieve` (query tower + MIPS + candidate assembly), `candidate_embeddings` (doc
tower over the candidates, "full"; or their vectors from the index, "cached" with the doc
tower frozen), `encoder_log_likelihood` (the knowledge-augmented encoder over every
candidate; `encoder_log_probs` also keeps its vocabulary distributions for predictions),
then `pretrain_loss`. Run the forward under `device.autocast` for bf16.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from realm.model.index.block_store import BlockStore
from realm.model.training.candidates import Candidates, assemble_candidates, mips_fetch_size
from realm.model.training.stage_settings import CPU_MICRO_BATCH
from realm.model.networks.encoder import KnowledgeAugmentedEncoder, masked_target_log_likelihood
from realm.model.networks.inputs import (
    BertInputs,
    block_sequence,
    joint_sequence,
    length_sorted_groups,
    pad_batch,
)
from realm.model.networks.marginal import mask_log_scores, marginal_log_likelihood
from realm.model.index.mips import BruteForceIndex, MipsIndex
from realm.model.index.pooled_states import PooledStates
from realm.model.networks.retriever import Retriever, relevance_scores
from realm.model.tokenization import MAX_PRETRAIN_QUERY_WORDPIECES, QUERY_SPECIAL_TOKENS, WordPieceTokenizer, join

log = logging.getLogger(__name__)

# The paper masks one salient span of at most 10 wordpieces; random fallback spans likewise.
MAX_MASKED_WORDPIECES = 10


@dataclass
class PretrainBatch:
    """A batch of masked queries with what the retriever and the encoder need of them."""

    queries: BertInputs  # [batch, query_length] `[CLS] masked x [SEP]`
    masked_query_ids: list[list[int]]  # masked x without specials, for the joint inputs
    mlm_positions: torch.Tensor  # [batch, max_masks] position in `[CLS] x ...` (query and joint alike)
    mlm_targets: torch.Tensor  # [batch, max_masks] original wordpiece ids
    mlm_mask: torch.Tensor  # [batch, max_masks] bool, real slots
    origin_block_ids: list[int]
    forbidden_block_ids: list[list[int]]
    num_random_spans: int  # examples without a salient span that fell back to a random one


def random_span(example_id: int, num_tokens: int, max_span: int = MAX_MASKED_WORDPIECES) -> list[int]:
    """A random contiguous span for an example without a salient one, seeded by its id so a
    resumed run masks the same wordpieces."""
    rng = np.random.default_rng(example_id & 0x7FFF_FFFF_FFFF_FFFF)
    width = int(rng.integers(1, min(max_span, num_tokens) + 1))
    start = int(rng.integers(0, num_tokens - width + 1))
    return list(range(start, start + width))


def mask_query(
    token_ids: Sequence[int],
    masked_positions: Sequence[int],
    mask_id: int,
    max_query_wordpieces: int = MAX_PRETRAIN_QUERY_WORDPIECES,
) -> tuple[list[int], list[int], list[int]]:
    """(masked x, positions in masked x, original ids), x cropped to fit `[CLS] x [SEP]` in
    `max_query_wordpieces` around the masked span so the span itself is never cut."""
    budget = max_query_wordpieces - QUERY_SPECIAL_TOKENS
    positions = sorted(masked_positions)[:MAX_MASKED_WORDPIECES]
    start = 0
    if len(token_ids) > budget:
        centre = (positions[0] + positions[-1]) // 2
        start = int(np.clip(centre - budget // 2, 0, len(token_ids) - budget))
    window = list(token_ids[start : start + budget])
    local = [p - start for p in positions]
    targets = [window[p] for p in local]
    for p in local:
        window[p] = mask_id
    return window, local, targets


def make_pretrain_batch(
    tokenizer: WordPieceTokenizer,
    examples: Sequence[Mapping],
    max_query_wordpieces: int = MAX_PRETRAIN_QUERY_WORDPIECES,
) -> PretrainBatch:
    """Batch rows of `pretrain_examples/` (dicts with the PRETRAIN_EXAMPLES fields)."""
    masked_ids, positions, targets, num_random = [], [], [], 0
    for example in examples:
        span = list(example["masked_token_positions"])
        if not span:
            span = random_span(int(example["example_id"]), len(example["token_ids"]))
            num_random += 1
        ids, local, original = mask_query(example["token_ids"], span, tokenizer.mask_id, max_query_wordpieces)
        masked_ids.append(ids)
        positions.append([p + 1 for p in local])  # + 1: [CLS]
        targets.append(original)
    max_masks = max(len(p) for p in positions)
    mlm_positions = torch.zeros((len(examples), max_masks), dtype=torch.long)
    mlm_targets = torch.zeros((len(examples), max_masks), dtype=torch.long)
    mlm_mask = torch.zeros((len(examples), max_masks), dtype=torch.bool)
    for row, (p, t) in enumerate(zip(positions, targets)):
        mlm_positions[row, : len(p)] = torch.tensor(p)
        mlm_targets[row, : len(t)] = torch.tensor(t)
        mlm_mask[row, : len(p)] = True
    return PretrainBatch(
        queries=pad_batch([join(tokenizer, ids) for ids in masked_ids], tokenizer.pad_id),
        masked_query_ids=masked_ids,
        mlm_positions=mlm_positions,
        mlm_targets=mlm_targets,
        mlm_mask=mlm_mask,
        origin_block_ids=[int(e["origin_block_id"]) for e in examples],
        forbidden_block_ids=[list(e["forbidden_block_ids"]) for e in examples],
        num_random_spans=num_random,
    )


def retrieve(
    retriever: Retriever,
    index: MipsIndex | BruteForceIndex,
    batch: PretrainBatch,
    num_candidates: int,
    device: torch.device,
) -> tuple[torch.Tensor, Candidates]:
    """Query embeddings [batch, d] (with graph) and the batch's candidates, null first,
    trivial retrievals excluded."""
    query_embeddings = retriever.embed_queries(batch.queries.to(device))  # [batch, d]
    fetch = mips_fetch_size(batch.forbidden_block_ids, num_candidates)
    hit_scores, hit_block_ids = index.search(query_embeddings.detach().cpu().numpy(), fetch)
    candidates = assemble_candidates(
        hit_scores, hit_block_ids, batch.origin_block_ids, batch.forbidden_block_ids, num_candidates
    )
    return query_embeddings, candidates


def _real_slots(candidates: Candidates) -> np.ndarray:
    real = candidates.mask.copy()
    real[:, 0] = False  # the null document
    return real


def candidate_embeddings(
    retriever: Retriever,
    tokenizer: WordPieceTokenizer,
    blocks: BlockStore,
    candidates: Candidates,
    device: torch.device,
    index: MipsIndex | BruteForceIndex | None = None,
    micro_batch: int = CPU_MICRO_BATCH,
    pooled_states: PooledStates | None = None,
) -> torch.Tensor:
    """Embed_doc(z) of every candidate, [batch, k, d] float32.

    Without `index` ("whole"), the doc tower embeds each distinct candidate once, with graph
    unless frozen, so p(z|x) is computed with the current θ on both towers. With `index`
    ("frozen"), real candidates take their stored vectors; the null document is always
    embedded by the doc tower. With `pooled_states` ("projection"), the doc tower's projection
    (with graph) projects each candidate's pooled state, its BERT never running but for the
    null document. Padding slots get the null document's vector (masked later).
    """
    size, k = candidates.block_ids.shape
    real = _real_slots(candidates)
    real_slots = torch.from_numpy(real).to(device)[:, :, None]  # [batch, k, 1]
    null_sequence = block_sequence(tokenizer, [], [])
    if index is not None:
        null = retriever.embed_passages(pad_batch([null_sequence], tokenizer.pad_id).to(device))  # [1, d]
        stored = torch.zeros(size, k, null.shape[1], device=device)
        stored[real_slots[:, :, 0]] = torch.from_numpy(index.lookup(candidates.block_ids[real])).to(device)
        return torch.where(real_slots, stored, null.view(1, 1, -1))  # [batch, k, d]
    unique_ids = np.unique(candidates.block_ids[real])
    rows = np.where(real, np.searchsorted(unique_ids, candidates.block_ids) + 1, 0)  # [batch, k]
    if pooled_states is not None:
        tower = retriever.doc_embedder
        with torch.no_grad():
            null_state = tower.pooled(**pad_batch([null_sequence], tokenizer.pad_id).to(device).as_kwargs()).float()
        states = torch.cat([null_state, torch.from_numpy(pooled_states.lookup(unique_ids)).to(device)])
        return tower.project(states).float()[torch.from_numpy(rows).to(device)]  # [batch, k, d]
    sequences = [null_sequence] + [
        block_sequence(tokenizer, blocks.title_ids(int(b)), blocks.body_ids(int(b))) for b in unique_ids
    ]
    table = _forward_length_sorted(
        sequences, lambda inputs, _: retriever.embed_passages(inputs.to(device)), tokenizer.pad_id, micro_batch
    )  # [1 + distinct, d], row 0 the null document
    return table[torch.from_numpy(rows).to(device)]  # [batch, k, d]


def _forward_length_sorted(sequences: list[tuple[list[int], list[int]]], forward, pad_id: int, micro_batch: int):
    """`forward(padded inputs, their row indices) -> [rows, ...]` (or a tuple of such tensors)
    over length-sorted micro-batches of `micro_batch` sequences; the results come back
    concatenated in the order of `sequences`."""
    groups = length_sorted_groups([len(ids) for ids, _ in sequences], micro_batch)
    outputs = [forward(pad_batch([sequences[r] for r in rows], pad_id), rows) for rows in groups]
    order = torch.from_numpy(np.argsort(np.concatenate(groups)))
    if isinstance(outputs[0], tuple):
        return tuple(torch.cat(parts)[order.to(parts[0].device)] for parts in zip(*outputs))
    joined = torch.cat(outputs)
    return joined[order.to(joined.device)]


def retrieval_logits(query_embeddings: torch.Tensor, doc_embeddings: torch.Tensor, candidates: Candidates) -> torch.Tensor:
    """f(x,z) [batch, k], float32, LOG_ZERO at padding candidates."""
    mask = torch.from_numpy(candidates.mask).to(query_embeddings.device)
    return mask_log_scores(relevance_scores(query_embeddings, doc_embeddings), mask)


def encoder_log_likelihood(
    encoder: KnowledgeAugmentedEncoder,
    tokenizer: WordPieceTokenizer,
    blocks: BlockStore,
    batch: PretrainBatch,
    candidates: Candidates,
    device: torch.device,
    micro_batch: int = CPU_MICRO_BATCH,
) -> torch.Tensor:
    """log p(y|z,x) of every (example, candidate), [batch, k] float32.

    Joint inputs are `[CLS] masked x [SEP] z_body [SEP]` (`[CLS] x [SEP] [SEP]` for the null
    document and padding), run in length-sorted micro-batches of `micro_batch`.
    """
    return _encoder_forward(encoder, tokenizer, blocks, batch, candidates, device, micro_batch, keep_log_probs=False)


def encoder_log_probs(
    encoder: KnowledgeAugmentedEncoder,
    tokenizer: WordPieceTokenizer,
    blocks: BlockStore,
    batch: PretrainBatch,
    candidates: Candidates,
    device: torch.device,
    micro_batch: int = CPU_MICRO_BATCH,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(y|z,x) [batch, k] as `encoder_log_likelihood`, and log p(v|z,x) over the whole
    vocabulary at each masked slot [batch, k, max_masks, vocab] float32, detached, 0 at unused
    slots) from one forward: the second gives argmax predictions (MLM accuracy) for free."""
    return _encoder_forward(encoder, tokenizer, blocks, batch, candidates, device, micro_batch, keep_log_probs=True)


def _encoder_forward(encoder, tokenizer, blocks, batch, candidates, device, micro_batch: int, keep_log_probs: bool):
    size, k = candidates.block_ids.shape
    real = _real_slots(candidates)
    pairs = [
        (
            batch.masked_query_ids[row],
            blocks.body_ids(int(candidates.block_ids[row, slot])) if real[row, slot] else [],
        )
        for row in range(size)
        for slot in range(k)
    ]
    sequences = [joint_sequence(tokenizer, query, body) for query, body in pairs]
    example = np.repeat(np.arange(size), k)  # [batch * k] example of each sequence

    def forward(inputs: BertInputs, rows: np.ndarray):
        of_example = torch.from_numpy(example[rows])
        mlm_mask = batch.mlm_mask[of_example].to(device)  # [rows, max_masks]
        log_probs = encoder.masked_log_probs(inputs.to(device), batch.mlm_positions[of_example].to(device), mlm_mask)
        log_likelihood = masked_target_log_likelihood(log_probs, batch.mlm_targets[of_example].to(device), mlm_mask)
        if not keep_log_probs:
            return log_likelihood  # [rows]
        per_slot = log_probs.new_zeros(*mlm_mask.shape, log_probs.shape[1])  # [rows, max_masks, vocab]
        per_slot[mlm_mask] = log_probs.detach()  # nonzero() order is the boolean-index order
        return log_likelihood, per_slot

    outputs = _forward_length_sorted(sequences, forward, tokenizer.pad_id, micro_batch)
    if not keep_log_probs:
        return outputs.view(size, k)
    log_likelihood, per_slot = outputs
    return log_likelihood.view(size, k), per_slot.view(size, k, *per_slot.shape[1:])


def candidates_holding_span(blocks: BlockStore, batch: PretrainBatch, candidates: Candidates) -> np.ndarray:
    """[batch, k] bool: the real candidates whose body holds the example's masked wordpieces
    verbatim (in order, contiguous). Copying from a retrieved block can only help examples with
    one (`.any(axis=1)`), so their fraction bounds what retrieval can add to masked-span accuracy."""
    real = _real_slots(candidates)
    holds = np.zeros(real.shape, dtype=bool)
    for row in range(len(real)):
        target = batch.mlm_targets[row][batch.mlm_mask[row]].tolist()
        for slot in np.flatnonzero(real[row]):
            body = blocks.body_ids(int(candidates.block_ids[row, slot]))
            holds[row, slot] = any(body[i : i + len(target)] == target for i in range(len(body) - len(target) + 1))
    return holds


def pretrain_loss(retrieval_logits: torch.Tensor, log_p_y_given_z: torch.Tensor) -> torch.Tensor:
    """−mean over the batch of log p(y|x); padding candidates are already at LOG_ZERO."""
    return -marginal_log_likelihood(retrieval_logits, log_p_y_given_z).mean()


def salient_examples(examples: list[dict], examples_path: str) -> list[dict]:
    """The examples with a salient span: what REALM masks (and the random_spans ablation
    re-masks at random, so both train on the same sentences). A sentence without one would fall
    back to a random span, unpredictable from any block: much of the loss, none of retrieval's use."""
    kept = [example for example in examples if example["masked_token_positions"]]
    if not kept:
        raise ValueError(f"{examples_path}: none of {len(examples)} pre-training examples has a salient span")
    log.info("pre-training on %d of %d examples (those with a salient span)", len(kept), len(examples))
    return kept


@dataclass(frozen=True)
class StepOutputs:
    """What one pre-training forward gives the step and the evaluation."""

    loss: torch.Tensor  # [] with graph
    log_p_z_given_x: torch.Tensor  # [batch, k] detached
    predictions: torch.Tensor  # [batch, max_masks] argmax of the per-position marginal
    candidates: Candidates
    # [batch, k] bool, see `candidates_holding_span`
    holding: np.ndarray
    # [batch, k] bool: right by the argmax of p(v|z,x) reading that candidate alone (column 0:
    # the null document), whatever p(z|x) makes of it
    right_per_candidate: torch.Tensor

    @property
    def span_in_candidates(self) -> np.ndarray:
        """[batch] bool: the masked span occurs verbatim in a retrieved block."""
        return self.holding.any(axis=1)
