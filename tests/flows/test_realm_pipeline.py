import math

import pyarrow.parquet as pq

from realm.cli.main import main
from realm.flows.realm_pipeline import realm_pipeline
from realm.model.networks.checkpoint import load_components
from realm.schemas import PREDICTIONS, read_table
from tests.flows.tiny_run import tiny_params


def test_whole_chain_end_to_end_then_a_rerun_is_all_cache_hits(run_root, capsys):
    params = tiny_params(run_root)
    result = realm_pipeline(params)

    assert result["ict"]["step"] == 6 and 0.0 <= result["ict"]["heldout_accuracy"] <= 1.0
    assert result["pretrain"]["step"] == 6
    assert {"accuracy_with_retrieval", "accuracy_null_only"} <= set(result["pretrain"])
    assert result["pretrain"]["refreshes"], "no asynchronous refresh was swapped in"
    assert result["warmup"]["step"] == math.ceil(result["warmup"]["training_questions"] / 2) > 0
    assert result["finetune"]["init_checkpoint"] == result["warmup"]["checkpoint"]
    assert result["finetune"]["step"] == math.ceil(result["finetune"]["training_questions"] / 2) > 0
    demo = result["evaluate"]["demo"]
    assert demo["n"] == 40 and 0.0 <= demo["em"] <= 1.0
    assert demo["recall_at_1"] <= demo["recall_at_5"] <= demo["recall_at_20"]
    predictions = read_table(str(run_root / "predictions" / "demo.parquet"), PREDICTIONS)
    assert predictions.num_rows == 40
    assert all(len(ids) == 20 for ids in predictions["block_ids"].to_pylist())
    for stage in ("ict", "pretrain", "warmup", "finetune"):
        assert (run_root / "reports" / f"{stage}_loss.png").stat().st_size > 0
    assert pq.read_schema(next((run_root / "predictions").glob("*.parquet"))).names == PREDICTIONS.names

    # `realm ask` answers from the run's best validated checkpoint, the answer's block marked.
    capsys.readouterr()
    assert main(["ask", "--run", str(run_root), "--evidence", "5", "who was the commander of apollo 11"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("answer: ") and shown.count("<- the answer") == 1

    logged = {stage: (run_root / "reports" / f"{stage}_metrics.jsonl").read_text() for stage in ("ict", "warmup", "finetune")}
    again = realm_pipeline(params)
    assert all(again[stage] == result[stage] for stage in ("ict", "warmup", "finetune"))
    # Cache hits: the cached stages logged no training step the second time.
    assert {stage: (run_root / "reports" / f"{stage}_metrics.jsonl").read_text() for stage in logged} == logged


def test_a_sentence_encoder_start_runs_through_pretraining_fine_tuning_and_evaluation(run_root):
    """The default run's shape on the tiny model: towers deeper than the preset and
    mean-pooled, no ICT step, a frozen retriever in cached pre-training, no reader warm-up
    (fine-tuning starts from pre-training's checkpoint); the fine-tuned query tower keeps its
    depth and pooling, so questions meet the index they must."""
    params = tiny_params(run_root)
    params.ict = params.ict.model_copy(update={"steps": 0, "tower_layers": 3, "retrieval_pooling": "mean"})
    params.pretrain = params.pretrain.model_copy(
        update={"doc_tower": "frozen", "retriever_frozen_steps": 6, "untrained_eval_examples": 8}
    )
    params.warmup = params.warmup.model_copy(update={"questions": 0})
    result = realm_pipeline(params)
    assert result["warmup"] == {"checkpoint": None, "step": 0}
    assert result["finetune"]["init_checkpoint"] == result["pretrain"]["checkpoint"]
    assert result["ict"]["step"] == 0 and result["pretrain"]["refreshes"] == []
    assert result["pretrain"]["index"].endswith("/index/0") and result["pretrain"]["untrained"]["examples"] == 8
    assert result["evaluate"]["demo"]["n"] == 40

    query_tower = load_components(result["finetune"]["checkpoint"])["query_embedder"]
    assert query_tower.pooling == "mean" and query_tower.config.num_hidden_layers == 3


def test_on_a_users_corpus_the_chain_stops_after_pre_training_without_questions_and_says_so():
    from realm.flows.params import PipelineParams
    from realm.flows.realm_pipeline import evaluation_left_out, stop_after_pretraining

    vital = PipelineParams.preset("tiny", output="runs/t")
    assert stop_after_pretraining(vital) is None and evaluation_left_out(vital, {}) is None
    users = vital.model_copy(update={"prepare": vital.prepare.model_copy(update={"corpus": "warc", "input": "x", "limit": None})})
    note = stop_after_pretraining(users)
    assert note.startswith("stopped after pre-training: no questions to fine-tune on for corpus 'warc'") and "\n" not in note
    with_questions = users.model_copy(update={"finetune": users.finetune.model_copy(update={"qa_train": ["q.jsonl"]})})
    assert stop_after_pretraining(with_questions) is None
    left_out = evaluation_left_out(with_questions, {"best_validation_em": 0.25, "validation_questions": 8})
    assert "exact match 0.250 on the 8 questions of --qa it held out" in left_out
    evaluated = with_questions.model_copy(update={"evaluate": with_questions.evaluate.model_copy(update={"qa": ["dev.jsonl"]})})
    assert evaluation_left_out(evaluated, {}) is None
