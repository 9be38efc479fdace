import dataclasses
import hashlib
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from realm.model.block_store import BlockStore
from realm.model.checkpoint import load_components, save_checkpoint
from realm.model.config import build_component
from realm.model.encoder import build_encoder
from realm.model.inputs import pad_batch
from realm.model.bm25 import Bm25Index
from realm.model.mips import MipsIndex
from realm.model.qa_data import QAExample
from realm.model.question_retrieval import DenseRetriever
from realm.model.reader import build_reader, find_gold_spans, reader_inputs, reader_log_likelihood, span_text
from realm.model.retriever import Embedder
from realm.model.tokenization import join
from realm.model.train_finetune import WARM_START, FinetuneConfig, finetune_loss, regex_gold_spans, train_finetune
from tests.model.test_answering import write_qa_corpus

CPU = torch.device("cpu")
EXAMPLES = [
    QAExample("What is the capital of France?", ["Paris"], "test"),
    QAExample("Who wrote the first algorithm for the Analytical Engine?", ["Ada Lovelace"], "test"),
    QAExample("Which river flows north into the Mediterranean Sea?", ["the Nile"], "test"),
    QAExample("In which years did Marie Curie win Nobel Prizes?", [r"19(03|11)"], "trec", "regex"),
]
UNANSWERABLE = QAExample("Who painted the Mona Lisa?", ["Leonardo da Vinci"], "test")
# Reading the whole 8-block corpus, so every answerable question is answerable in its read blocks.
CONFIG = FinetuneConfig(
    steps=4, batch_size=3, learning_rate=1e-3, warmup_steps=1, checkpoint_every=2, log_every=1, num_read=8, num_retrieve=8
)


@pytest.fixture(scope="module")
def qa_corpus(tmp_path_factory, tokenizer, blocks_table, tiny_config) -> tuple[str, str]:
    return write_qa_corpus(tmp_path_factory.mktemp("qa"), tokenizer, blocks_table, tiny_config)


@pytest.fixture(scope="module")
def distinct_vectors_index(tmp_path_factory, qa_corpus, blocks_table) -> str:
    """An index of random Gaussian vectors: a random tiny doc tower embeds every block almost
    alike, which leaves the query tower nothing to learn to rank by."""
    vectors = np.random.default_rng(0).normal(size=(blocks_table.num_rows, 128)).astype(np.float32)
    return str(MipsIndex.build(vectors, blocks_table["block_id"].to_numpy()).save(tmp_path_factory.mktemp("index"), 0))


def _train(qa_corpus, root, tiny_config, config=CONFIG, examples=EXAMPLES, init_checkpoint=None, reader_init=None):
    blocks_path, index_path = qa_corpus
    logged = []
    result = train_finetune(
        examples, blocks_path, index_path, init_checkpoint, str(root), tiny_config, config, logged.append, CPU,
        reader_init=reader_init,
    )
    return result, logged


def _weights(checkpoint) -> dict[str, torch.Tensor]:
    return {
        f"{name}.{key}": value
        for name, model in load_components(checkpoint).items()
        for key, value in model.state_dict().items()
    }


def _digests(path: str) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in Path(path).iterdir()}


def test_regex_answers_mark_the_spans_whose_text_the_pattern_matches_in_full(tokenizer):
    body = tokenizer.encode("Marie Curie won two Nobel Prizes, in 1903 and 1911; Curium is named after her.")

    def texts(patterns):
        return {span_text(tokenizer, body, s, e) for s, e in regex_gold_spans(tokenizer, body, patterns)}

    assert texts([r"19(03|11)"]) == {"1903", "1911"}  # not "1903 and 1911": a prefix match is no target
    assert texts([r"nobel\s+prizes?", "curie"]) == {"nobel prizes", "curie"}
    assert texts(["cur"]) == set()  # only inside words ("curie", "curium")
    assert texts(["(unclosed"]) == set()


def test_loss_is_early_update_plus_reader_marginal_computed_by_brute_force(qa_corpus, tokenizer, tiny_config):
    """One question, every block one at a time: retriever term −log Σ_{z with an answer} p(z|x),
    reader term −log Σ_z p(z|x) p(y|z,x), p(z|x) from the query tower and the stored vectors."""
    blocks_path, index_path = qa_corpus
    blocks, index = BlockStore.from_parquet(blocks_path), MipsIndex.load(index_path)
    query_embedder, reader = build_component(Embedder, tiny_config).eval(), build_reader(tiny_config).eval()
    example = EXAMPLES[0]
    retriever = DenseRetriever(query_embedder, index, tokenizer, tiny_config, CPU)
    loss, stats = finetune_loss(retriever, reader, tokenizer, blocks, [example], tiny_config, CONFIG, CPU)

    question_ids = tokenizer.encode(example.question)
    with torch.no_grad():
        query = query_embedder(**pad_batch([join(tokenizer, question_ids)], tokenizer.pad_id).as_kwargs())[0]
        log_p_z, log_p_y_given_z, holds_answer = [], [], []
        for block_id in index.block_ids:
            log_p_z.append(float(query @ torch.from_numpy(index.lookup([block_id])[0])))
            body = blocks.body_ids(int(block_id))
            gold = find_gold_spans(tokenizer, body, example.answers)
            joint, spans = reader_inputs(tokenizer, [(question_ids, body)])
            log_p_y_given_z.append(float(reader_log_likelihood(reader.span_logits(joint, spans), spans.gold_mask([gold]))[0]))
            holds_answer.append(bool(gold))
    log_p_z = torch.log_softmax(torch.tensor(log_p_z, dtype=torch.float64), 0)
    retriever_loss = -torch.logsumexp(log_p_z[torch.tensor(holds_answer)], 0)
    reader_loss = -torch.logsumexp(log_p_z + torch.tensor(log_p_y_given_z, dtype=torch.float64), 0)
    assert sum(holds_answer) == 2  # "Paris" is in the Paris and the Seine blocks
    assert stats.retriever_loss == pytest.approx(float(retriever_loss), rel=1e-4)
    assert stats.reader_loss == pytest.approx(float(reader_loss), rel=1e-4)
    assert loss.item() == pytest.approx(float(retriever_loss + reader_loss), rel=1e-4)


def test_questions_without_an_answer_are_counted_and_gradients_reach_only_the_trained_towers(
    qa_corpus, tokenizer, tiny_config
):
    blocks_path, index_path = qa_corpus
    blocks, index = BlockStore.from_parquet(blocks_path), MipsIndex.load(index_path)
    query_embedder, reader = build_component(Embedder, tiny_config), build_reader(tiny_config)
    config = dataclasses.replace(CONFIG, num_read=3)
    batch = [EXAMPLES[3], UNANSWERABLE]  # regex answers are found like text ones
    retriever = DenseRetriever(query_embedder, index, tokenizer, tiny_config, CPU)
    loss, stats = finetune_loss(retriever, reader, tokenizer, blocks, batch, tiny_config, config, CPU)
    assert stats.without_answer_in_retrieval == 1
    assert stats.without_answer_in_read >= 1 and math.isfinite(loss.item())
    loss.backward()
    for model in (query_embedder, reader):
        assert model.bert.encoder.layer[0].output.dense.weight.grad.abs().sum() > 0


def test_both_terms_fall_on_a_memorisable_set_and_the_index_stays_untouched(
    qa_corpus, distinct_vectors_index, tmp_path, tiny_config
):
    before = _digests(distinct_vectors_index)
    config = dataclasses.replace(CONFIG, steps=20, batch_size=4, warmup_steps=3, checkpoint_every=20)
    result, logged = _train(
        (qa_corpus[0], distinct_vectors_index), tmp_path, tiny_config, config, examples=[*EXAMPLES, UNANSWERABLE]
    )

    assert len(logged) == 20 and all(math.isfinite(m["loss"]) for m in logged)
    for term in ("retriever_loss", "reader_loss"):
        losses = [m[term] for m in logged]
        assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), term
    assert result["step"] == 20 and result["examples_seen"] == 80
    # The unanswerable question is 1 in 5 of every epoch of the batch stream.
    assert result["examples_without_answer_in_retrieval"] == 16
    assert result["fraction_without_answer_in_retrieval"] == pytest.approx(0.2)
    assert sorted(p.name for p in Path(result["checkpoint"]).iterdir() if p.is_dir()) == ["query_embedder", "reader"]
    assert _digests(distinct_vectors_index) == before


def test_resume_continues_exactly_where_it_stopped(qa_corpus, tmp_path, tiny_config):
    """A crash after the step-2 checkpoint (step 4's removed) and a rerun give the same steps
    3-4 as the uninterrupted run: same batches, dropout masks, optimizer and schedule."""
    straight, straight_log = _train(qa_corpus, tmp_path, tiny_config)
    straight_weights = _weights(straight["checkpoint"])
    shutil.rmtree(straight["checkpoint"])

    resumed, resumed_log = _train(qa_corpus, tmp_path, tiny_config)
    assert [m["step"] for m in resumed_log] == [3, 4]
    assert [m["loss"] for m in resumed_log] == [m["loss"] for m in straight_log[2:]]
    resumed_weights = _weights(resumed["checkpoint"])
    assert all(torch.equal(resumed_weights[key], value) for key, value in straight_weights.items())
    assert resumed["examples_seen"] == straight["examples_seen"] == 12


def test_a_fresh_run_starts_from_the_pretrained_query_tower_and_encoder(qa_corpus, tmp_path, tiny_config):
    pretrained = {
        "query_embedder": build_component(Embedder, tiny_config),
        "doc_embedder": build_component(Embedder, tiny_config),
        "encoder": build_encoder(tiny_config),
    }
    init = save_checkpoint(tmp_path / "pretrain", 100, pretrained)
    result, _ = _train(
        qa_corpus, tmp_path / "finetune", tiny_config, dataclasses.replace(CONFIG, steps=0), init_checkpoint=str(init)
    )
    started = load_components(result["checkpoint"])
    assert sorted(started) == ["query_embedder", "reader"]
    for key, value in pretrained["query_embedder"].state_dict().items():
        assert torch.equal(started["query_embedder"].state_dict()[key], value), key
    for key, value in pretrained["encoder"].bert.state_dict().items():
        assert torch.equal(started["reader"].bert.state_dict()[key], value), key


def test_the_query_tower_keeps_the_depth_and_pooling_of_its_checkpoint(qa_corpus, tmp_path, tiny_config):
    """A sentence-encoder start (deeper than the preset, mean-pooled) fine-tunes as it was built."""
    tower_config = dataclasses.replace(tiny_config, num_layers=3, retrieval_pooling="mean", dropout=0.0)
    towers = {name: build_component(Embedder, tower_config) for name in ("query_embedder", "doc_embedder")}
    init = save_checkpoint(tmp_path / "ict", 0, towers)
    result, _ = _train(
        qa_corpus, tmp_path / "finetune", tiny_config, dataclasses.replace(CONFIG, steps=0), init_checkpoint=str(init)
    )
    query_tower = load_components(result["checkpoint"])["query_embedder"]
    assert query_tower.pooling == "mean" and query_tower.config.num_hidden_layers == 3
    assert query_tower.config.hidden_dropout_prob == tiny_config.dropout  # the preset's, not the checkpoint's


def test_reader_init_gives_the_ablations_their_mixed_starting_points(qa_corpus, tmp_path, tiny_config):
    """REALM retriever + baseline encoder: the query tower from one checkpoint, the reader from
    another's encoder, or from the warm start when that one (ICT's) has no encoder."""
    realm = {"query_embedder": build_component(Embedder, tiny_config), "encoder": build_encoder(tiny_config)}
    other_encoder = {"query_embedder": build_component(Embedder, tiny_config), "encoder": build_encoder(tiny_config)}
    ict = {"query_embedder": build_component(Embedder, tiny_config), "doc_embedder": build_component(Embedder, tiny_config)}
    paths = {name: str(save_checkpoint(tmp_path / name, 1, components))
             for name, components in (("realm", realm), ("other", other_encoder), ("ict", ict))}
    no_steps = dataclasses.replace(CONFIG, steps=0)

    mixed, _ = _train(qa_corpus, tmp_path / "mixed", tiny_config, no_steps, init_checkpoint=paths["realm"], reader_init=paths["other"])
    started = load_components(mixed["checkpoint"])
    for key, value in realm["query_embedder"].state_dict().items():
        assert torch.equal(started["query_embedder"].state_dict()[key], value), key
    for key, value in other_encoder["encoder"].bert.state_dict().items():
        assert torch.equal(started["reader"].bert.state_dict()[key], value), key

    for name, reader_init in (("from-ict", paths["ict"]), ("warm-start", WARM_START)):
        baseline, _ = _train(qa_corpus, tmp_path / name, tiny_config, no_steps, init_checkpoint=paths["realm"], reader_init=reader_init)
        reader = load_components(baseline["checkpoint"])["reader"].bert.state_dict()
        assert not all(torch.equal(reader[k], v) for k, v in realm["encoder"].bert.state_dict().items()), name


def test_bm25_fine_tuning_trains_the_reader_alone_and_checkpoints_only_it(qa_corpus, tmp_path, tiny_config):
    bm25_path = str(Bm25Index.from_blocks(qa_corpus[0]).save(tmp_path / "bm25"))
    config = dataclasses.replace(CONFIG, steps=12, batch_size=4, warmup_steps=2, checkpoint_every=12, num_read=3, num_retrieve=3)
    result, logged = _train((qa_corpus[0], bm25_path), tmp_path / "finetune", tiny_config, config)
    assert all(m["retriever_loss"] == 0.0 for m in logged)
    readers = [m["reader_loss"] for m in logged]
    assert np.mean(readers[-3:]) < 0.5 * np.mean(readers[:3])
    assert sorted(p.name for p in Path(result["checkpoint"]).iterdir() if p.is_dir()) == ["reader"]
