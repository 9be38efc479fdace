import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from realm.model.networks.checkpoint import load_components
from realm.model.networks.config import ModelConfig
from realm.model.training.stage_settings import IctConfig
from realm.model.training.train_ict import IctTrainer, ict_loss, ict_scores
from realm.schemas import ICT_EXAMPLES, read_table, write_table
from tests.model.corpus_fixture import CORPUS

CPU = torch.device("cpu")
# REALM's own ICT: the preset's towers, [CLS]-pooled, a random projection, trained.
CONFIG = IctConfig(
    steps=4, batch_size=4, learning_rate=1e-3, warmup_steps=1, checkpoint_every=2, log_every=1,
    heldout_examples=3, max_query_wordpieces=16, max_block_wordpieces=32,
    tower_layers=None, retrieval_pooling="cls", projection_init="random",
)


@pytest.fixture(scope="module")
def ict_examples_path(tmp_path_factory, tokenizer) -> str:
    """Two ICT examples per corpus block: each half of its sentence as the query, the title
    and the other half as the context."""
    rows = []
    for block_id, title, text in CORPUS:
        words = text.split()
        halves = [" ".join(words[: len(words) // 2]), " ".join(words[len(words) // 2 :])]
        for which in (0, 1):
            query, context = halves[which], halves[1 - which]
            rows.append(
                {
                    "example_id": len(rows),
                    "query_text": query,
                    "query_token_ids": tokenizer.encode(query),
                    "context_block_id": block_id,
                    "context_title": title,
                    "context_text": context,
                    "context_title_token_ids": tokenizer.encode(title),
                    "context_body_token_ids": tokenizer.encode(context),
                    "query_kept_in_context": False,
                }
            )
    path = tmp_path_factory.mktemp("ict") / "ict_examples" / "part-0.parquet"
    return write_table(str(path), rows, ICT_EXAMPLES)


def _train(path, root, tiny_config, config=CONFIG):
    logged = []
    result = IctTrainer(path, str(root), tiny_config, config, device=CPU).run(logged.append)
    return result, logged


def _weights(checkpoint: str) -> dict[str, torch.Tensor]:
    return {
        f"{name}.{key}": value
        for name, model in load_components(checkpoint).items()
        for key, value in model.state_dict().items()
    }


def test_in_batch_scores_mask_other_contexts_of_the_same_block_and_loss_targets_the_diagonal():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    d = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    scores = ict_scores(q, d, np.array([5, 6, 5]))  # examples 0 and 2 share a block
    assert scores[0, 2] < -1e29 and scores[2, 0] < -1e29  # near-copies are not negatives
    assert scores[1].tolist() == [0.0, 1.0, 2.0]
    loss, accuracy = ict_loss(scores)
    rows = [torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0, 2.0]), torch.tensor([1.0, 4.0])]
    own = [0, 1, 1]  # the diagonal's index among each row's unmasked entries
    expected = -sum(torch.log_softmax(r, 0)[i] for r, i in zip(rows, own)) / 3
    torch.testing.assert_close(loss, expected)
    assert accuracy == pytest.approx(2 / 3)  # query 1 prefers context 2


def test_a_shard_of_queries_scored_against_the_whole_batch_gives_the_whole_batchs_rows():
    q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    d = torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])
    blocks = np.array([5, 6, 5])
    own = np.array([0, 2])  # one rank's queries 0 and 2 of the batch
    torch.testing.assert_close(ict_scores(q[own], d, blocks, own), ict_scores(q, d, blocks)[own])
    loss, accuracy = ict_loss(ict_scores(q[own], d, blocks, own), own)
    full = torch.nn.functional.cross_entropy(ict_scores(q, d, blocks), torch.arange(3), reduction="none")
    torch.testing.assert_close(loss, full[own].mean())
    assert accuracy == 1.0


def test_trains_both_towers_checkpoints_and_reports(ict_examples_path, tmp_path, tiny_config):
    result, logged = _train(ict_examples_path, tmp_path, tiny_config)
    assert result["step"] == 4 and result["heldout_examples"] == 3
    assert 0.0 <= result["heldout_accuracy"] <= 1.0 and np.isfinite(result["final_loss"])
    assert [m["step"] for m in logged] == [1, 2, 3, 4] and logged[-1]["loss"] == result["final_loss"]
    assert sorted(p.name for p in Path(result["checkpoint"]).iterdir() if p.is_dir()) == ["doc_embedder", "query_embedder"]
    assert Path(result["checkpoint"]).name == "4"


def test_resume_continues_exactly_where_it_stopped(ict_examples_path, tmp_path, tiny_config):
    """A crash after the step-2 checkpoint (step 4's removed) and a rerun give the same steps
    3-4 as the uninterrupted run: same batches, dropout masks, optimizer and schedule."""
    straight, straight_log = _train(ict_examples_path, tmp_path, tiny_config)
    straight_weights = _weights(straight["checkpoint"])
    shutil.rmtree(straight["checkpoint"])

    resumed, resumed_log = _train(ict_examples_path, tmp_path, tiny_config)
    assert [m["step"] for m in resumed_log] == [3, 4]
    assert [m["loss"] for m in resumed_log] == [m["loss"] for m in straight_log[2:]]
    resumed_weights = _weights(resumed["checkpoint"])
    assert all(torch.equal(resumed_weights[key], value) for key, value in straight_weights.items())
    assert resumed["heldout_accuracy"] == straight["heldout_accuracy"]


def test_a_run_whose_newest_checkpoint_was_damaged_resumes_from_the_one_before(ict_examples_path, tmp_path, tiny_config, caplog):
    """Step 4's checkpoint cut short (a disk that filled up): the rerun warns naming the file,
    resumes from step 2 and gives the uninterrupted run's steps 3-4, and step 4 again."""
    straight, straight_log = _train(ict_examples_path, tmp_path, tiny_config)
    # Copied: loaded tensors may map the file that is cut short next.
    straight_weights = {key: value.clone() for key, value in _weights(straight["checkpoint"]).items()}
    damaged = Path(straight["checkpoint"]) / "doc_embedder" / "model.safetensors"
    size = damaged.stat().st_size
    with open(damaged, "r+b") as handle:
        handle.truncate(1000)

    with caplog.at_level(logging.WARNING, logger="realm.model.publish"):
        resumed, resumed_log = _train(ict_examples_path, tmp_path, tiny_config)
    assert f"{damaged}: size 1000, manifest.json says {size}" in caplog.text
    assert [m["step"] for m in resumed_log] == [3, 4]
    assert [m["loss"] for m in resumed_log] == [m["loss"] for m in straight_log[2:]]
    resumed_weights = _weights(resumed["checkpoint"])
    assert all(torch.equal(resumed_weights[key], value) for key, value in straight_weights.items())


def test_only_the_newest_keep_checkpoints_stay(ict_examples_path, tmp_path, tiny_config):
    _train(ict_examples_path, tmp_path, tiny_config, CONFIG.model_copy(update={"checkpoint_every": 1}))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["3", "4"]  # keep_checkpoints: 2 by default


def test_a_finished_run_returns_its_evaluation_without_training(ict_examples_path, tmp_path, tiny_config):
    done, _ = _train(ict_examples_path, tmp_path, tiny_config)
    again, logged = _train(ict_examples_path, tmp_path, tiny_config)
    assert logged == []
    assert {k: again[k] for k in ("step", "checkpoint", "heldout_accuracy", "final_loss")} == {
        k: done[k] for k in ("step", "checkpoint", "heldout_accuracy", "final_loss")
    }


def test_sentence_encoder_start_publishes_mean_pooled_pca_towers_without_training(ict_examples_path, tmp_path):
    """steps = 0 with tower_layers / retrieval_pooling / projection_init / tower_scale: the towers are
    published as built, mean-pooled and scaled, with a projection whose rows are orthonormal
    principal directions and the same in both towers."""
    config = CONFIG.model_copy(
        update=dict(steps=0, tower_layers=1, retrieval_pooling="mean", projection_init="pca", tower_scale=20.0)
    )
    model_config = ModelConfig.preset("random-2l", retrieval_dim=8)  # PCA to 8-d needs >= 8 of the 16 contexts
    result, logged = _train(ict_examples_path, tmp_path, model_config, config)
    assert logged == [] and result["step"] == 0 and Path(result["checkpoint"]).name == "0"
    towers = load_components(result["checkpoint"])
    for tower in towers.values():
        assert tower.pooling == "mean" and tower.scale == 20.0 and tower.config.num_hidden_layers == 1
        weight = tower.projection.weight
        torch.testing.assert_close(weight @ weight.T, torch.eye(8), atol=1e-4, rtol=0)
    torch.testing.assert_close(towers["query_embedder"].projection.bias, towers["doc_embedder"].projection.bias)
    assert 0.0 <= result["heldout_accuracy"] <= 1.0


def test_the_same_examples_in_other_shards_train_to_the_same_losses(ict_examples_path, tmp_path, tiny_config):
    """Beam's workers decide which rows land in which shard, and in what order."""
    table = read_table(ict_examples_path, ICT_EXAMPLES)
    reshuffled = table.take(np.random.default_rng(0).permutation(table.num_rows))
    shards = tmp_path / "reprepared"
    write_table(str(shards / "part-0.parquet"), reshuffled.slice(0, 5), ICT_EXAMPLES)
    write_table(str(shards / "part-1.parquet"), reshuffled.slice(5), ICT_EXAMPLES)
    first, first_logged = _train(ict_examples_path, tmp_path / "first", tiny_config)
    again, again_logged = _train(str(shards), tmp_path / "again", tiny_config)
    assert [m["loss"] for m in again_logged] == [m["loss"] for m in first_logged]
    assert again["heldout_accuracy"] == first["heldout_accuracy"]


def test_changed_settings_start_a_new_stage_and_more_steps_go_on_with_the_old_one(ict_examples_path, tmp_path, tiny_config, caplog):
    root = tmp_path / "ict"
    _train(ict_examples_path, root, tiny_config)
    _, longer = _train(ict_examples_path, root, tiny_config, CONFIG.model_copy(update={"steps": 6}))
    assert [m["step"] for m in longer] == [5, 6]  # how long a stage runs is not one of its inputs

    with caplog.at_level(logging.WARNING, logger="realm.model.training.trainer"):
        _, logged = _train(ict_examples_path, root, tiny_config, CONFIG.model_copy(update={"learning_rate": 5e-4}))
    assert "(learning_rate 0.001 -> 0.0005): a new stage starts there" in caplog.text
    assert [m["step"] for m in logged] == [1, 2, 3, 4]
    assert sorted(p.name for p in (tmp_path / "ict.superseded-1").iterdir()) == ["4", "6"]
