import math

import pytest
import torch

from realm.model.index.block_store import BlockStore
from realm.model.index.embed_corpus import embed_window
from realm.model.networks.encoder import build_encoder
from realm.model.networks.inputs import block_sequence, joint_sequence, pad_batch
from realm.model.index.mips import MipsIndex
from realm.model.training.pretrain_step import (
    candidate_embeddings,
    candidates_holding_span,
    encoder_log_likelihood,
    make_pretrain_batch,
    mask_query,
    pretrain_loss,
    random_span,
    retrieval_logits,
    retrieve,
)
from realm.model.networks.retriever import build_retriever
from tests.model.corpus_fixture import CORPUS

CPU = torch.device("cpu")
ORIGIN, FORBIDDEN = CORPUS[0][0], CORPUS[1][0]


@pytest.fixture
def setup(tiny_config, tokenizer, blocks_table):
    retriever = build_retriever(tiny_config).eval()
    encoder = build_encoder(tiny_config).eval()
    vectors = embed_window(retriever.doc_embedder, tokenizer, blocks_table, 4, CPU, False)
    index = MipsIndex.build(vectors, blocks_table["block_id"].to_numpy())
    token_ids = tokenizer.encode("The Seine flows through Paris, the capital of France.")
    example = {
        "example_id": 99,
        "origin_block_id": ORIGIN,
        "forbidden_block_ids": [ORIGIN, FORBIDDEN],
        "token_ids": token_ids,
        "masked_token_positions": [5, 6],
    }
    batch = make_pretrain_batch(tokenizer, [example])
    return retriever, encoder, index, BlockStore(blocks_table), batch


def _scored_alone(retriever, encoder, tokenizer, batch, title, body) -> tuple[torch.Tensor, torch.Tensor]:
    """(Embed_doc(z) [d], log p(y|z,x) scalar) of one block read on its own, no batching or
    padding, for the batch's first example."""
    doc = retriever.embed_passages(pad_batch([block_sequence(tokenizer, title, body)], tokenizer.pad_id))[0]
    joint = pad_batch([joint_sequence(tokenizer, batch.masked_query_ids[0], body)], tokenizer.pad_id)
    return doc, encoder.masked_log_likelihood(joint, batch.mlm_positions, batch.mlm_targets, batch.mlm_mask)[0]


def test_candidates_exclude_trivial_blocks_and_start_with_null(setup):
    retriever, _, index, _, batch = setup
    _, candidates = retrieve(retriever, index, batch, num_candidates=8, device=CPU)
    real = candidates.block_ids[0, 1:][candidates.mask[0, 1:]].tolist()
    assert candidates.mask[0, 0]  # null document first
    assert ORIGIN not in real and FORBIDDEN not in real
    assert sorted(real) == sorted(b for b, _, _ in CORPUS if b not in (ORIGIN, FORBIDDEN))  # refilled to all 6
    assert candidates.mask[0].tolist() == [True] * 7 + [False]


def test_marginal_over_all_of_z_equals_the_exact_sum(setup, tokenizer):
    """With k covering the whole (allowed) corpus, the top-k marginal is the exact p(y|x)."""
    retriever, encoder, index, blocks, batch = setup
    with torch.no_grad():
        query_embeddings, candidates = retrieve(retriever, index, batch, num_candidates=8, device=CPU)
        f = retrieval_logits(query_embeddings, candidate_embeddings(retriever, tokenizer, blocks, candidates, CPU), candidates)
        log_p = encoder_log_likelihood(encoder, tokenizer, blocks, batch, candidates, CPU)
        got = -pretrain_loss(f, log_p)

        # Brute force: every allowed z (and the null document) one at a time, no padding, no batching.
        allowed = [([], [])] + [
            (blocks.title_ids(b), blocks.body_ids(b)) for b, _, _ in CORPUS if b not in (ORIGIN, FORBIDDEN)
        ]
        scores, likelihoods = [], []
        for title, body in allowed:
            doc, log_likelihood = _scored_alone(retriever, encoder, tokenizer, batch, title, body)
            scores.append((query_embeddings[0] @ doc).item())
            likelihoods.append(log_likelihood.item())
    normaliser = sum(math.exp(s) for s in scores)
    exact = math.log(sum(math.exp(s) / normaliser * math.exp(lp) for s, lp in zip(scores, likelihoods)))
    assert math.isclose(got.item(), exact, rel_tol=1e-4)


@pytest.mark.parametrize("micro_batch", [1, 3, 64])
def test_any_micro_batch_size_gives_each_candidate_its_own_scores(setup, tokenizer, micro_batch):
    """Candidates of different lengths, in length-sorted groups of 1, 3 or all, come back in
    candidate order with the values of each candidate's forward alone."""
    retriever, encoder, index, blocks, batch = setup
    with torch.no_grad():
        _, candidates = retrieve(retriever, index, batch, num_candidates=8, device=CPU)
        doc_embeddings = candidate_embeddings(retriever, tokenizer, blocks, candidates, CPU, micro_batch=micro_batch)
        log_p = encoder_log_likelihood(encoder, tokenizer, blocks, batch, candidates, CPU, micro_batch=micro_batch)
        slots = torch.from_numpy(candidates.mask[0]).nonzero().flatten().tolist()
        bodies = [[] if slot == 0 else blocks.body_ids(int(candidates.block_ids[0, slot])) for slot in slots]
        titles = [[] if slot == 0 else blocks.title_ids(int(candidates.block_ids[0, slot])) for slot in slots]
        alone = [_scored_alone(retriever, encoder, tokenizer, batch, title, body) for title, body in zip(titles, bodies)]
        alone_docs = torch.stack([doc for doc, _ in alone])
        alone_log_p = torch.stack([log_likelihood for _, log_likelihood in alone])
    assert len({len(body) for body in bodies}) > 2
    torch.testing.assert_close(doc_embeddings[0, slots], alone_docs, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(log_p[0, slots], alone_log_p, atol=1e-5, rtol=1e-4)


def test_gradients_reach_both_towers_and_the_encoder(setup, tokenizer):
    retriever, encoder, index, blocks, batch = setup
    query_embeddings, candidates = retrieve(retriever, index, batch, num_candidates=8, device=CPU)
    doc_embeddings = candidate_embeddings(retriever, tokenizer, blocks, candidates, CPU)
    loss = pretrain_loss(
        retrieval_logits(query_embeddings, doc_embeddings, candidates),
        encoder_log_likelihood(encoder, tokenizer, blocks, batch, candidates, CPU),
    )
    loss.backward()
    for model in (retriever.query_embedder, retriever.doc_embedder, encoder):
        assert model.bert.encoder.layer[0].output.dense.weight.grad.abs().sum() > 0


def test_cached_mode_uses_index_vectors_and_matches_full_mode(setup, tokenizer):
    retriever, _, index, blocks, batch = setup
    retriever.freeze_doc_tower = True
    with torch.no_grad():
        query_embeddings, candidates = retrieve(retriever, index, batch, num_candidates=8, device=CPU)
        full = candidate_embeddings(retriever, tokenizer, blocks, candidates, CPU)
    cached = candidate_embeddings(retriever, tokenizer, blocks, candidates, CPU, index=index)
    mask = torch.from_numpy(candidates.mask)
    torch.testing.assert_close(cached[mask], full[mask], atol=2e-5, rtol=1e-4)
    assert not cached.requires_grad


def test_mask_query_crops_around_the_span_and_keeps_targets():
    token_ids = list(range(1000, 1200))
    masked, positions, targets = mask_query(token_ids, [150, 151, 152], mask_id=103, max_query_wordpieces=96)
    assert len(masked) == 94
    assert targets == [1150, 1151, 1152]
    assert [masked[p] for p in positions] == [103, 103, 103]


def test_examples_without_a_salient_span_fall_back_to_a_seeded_random_span(tokenizer):
    example = {"example_id": -5, "origin_block_id": 1, "forbidden_block_ids": [1], "token_ids": list(range(2000, 2030))}
    batch = make_pretrain_batch(tokenizer, [{**example, "masked_token_positions": []}])
    assert batch.num_random_spans == 1
    span = random_span(-5, 30)
    assert span == random_span(-5, 30) and 1 <= len(span) <= 10
    assert batch.mlm_positions[0, : len(span)].tolist() == [p + 1 for p in span]


def test_span_in_candidates_finds_the_masked_wordpieces_verbatim_in_a_real_candidate(setup, tokenizer):
    retriever, _, index, blocks, _ = setup
    token_ids = tokenizer.encode("Paris lies on a river in France, far from Africa.")
    # "river in" stands in the Nile block; "paris" only in the excluded Paris and Seine blocks;
    # no block has "in france".

    def masked(*wanted):
        positions = [token_ids.index(tokenizer.encode(w)[0]) for w in wanted]
        example = {"example_id": 1, "origin_block_id": ORIGIN, "forbidden_block_ids": [ORIGIN, FORBIDDEN],
                   "token_ids": token_ids, "masked_token_positions": positions}
        return make_pretrain_batch(tokenizer, [example])

    found = {}
    for span in (("river",), ("river", "in"), ("in", "france"), ("paris",)):
        batch = masked(*span)
        _, candidates = retrieve(retriever, index, batch, num_candidates=8, device=CPU)
        holding = candidates_holding_span(blocks, batch, candidates)[0]  # [k]
        found[span] = [blocks.title(int(b)) for b in candidates.block_ids[0][holding]]
    assert found == {("river",): ["Nile"], ("river", "in"): ["Nile"], ("in", "france"): [], ("paris",): []}

