import json
import math
from pathlib import Path

import pytest

from realm.flows.demo import demo_qa_path
from realm.flows.evaluate import evaluate
from realm.flows.finetune_openqa import finetune_openqa
from realm.flows.params import EvaluateParams
from realm.model.networks.checkpoint import load_components
from realm.model.qa.calibration import Calibrator, run_calibrator
from realm.model.qa.qa_data import read_qa_file
from realm.model.training.train_finetune import is_validation_question
from realm.schemas.writer_lock import WriterBusy, writer_lock
from tests.flows.tiny_run import tiny_params


def test_bm25_baseline_fine_tunes_the_reader_alone_and_evaluates_with_bm25_evidence(run_root, tmp_path):
    """The BERT-Baseline needs no ICT or pre-training: BM25 over the blocks plus a reader."""
    params = tiny_params(run_root)
    finetune = params.finetune.model_copy(update={"retriever": "bm25"})
    result = finetune_openqa(params.run, finetune)
    assert result["training_questions"] > 0
    assert result["step"] == math.ceil(result["training_questions"] / 2) and result["index"].startswith(str(run_root / "bm25"))
    assert sorted(load_components(result["checkpoint"])) == ["reader"]
    # Fine-tuning ends by calibrating the checkpoint it kept on the questions it held out.
    held_out = [e for e in read_qa_file(finetune.qa_train[0]) if is_validation_question(e.question, finetune.validation_fraction)]
    calibration = result["calibration"]
    assert (calibration["questions"], calibration["num_read"]) == (len(held_out), finetune.num_read)
    assert (run_root / calibration["checkpoint"]).resolve() == Path(result["checkpoint"]).resolve()
    assert run_calibrator(run_root, result["checkpoint"]) == Calibrator(calibration["slope"], calibration["bias"])

    questions = tmp_path / "qa.jsonl"
    questions.write_text("\n".join(
        json.dumps({"question": q, "answers": a, "dataset": "mini"})
        for q, a in (("Where is the Eiffel Tower?", ["Paris"]), ("What is the capital of France?", ["Paris"]))
    ))
    metrics = evaluate(params.run, EvaluateParams(qa=[str(questions), str(demo_qa_path())]))
    assert metrics["mini"]["n"] == 2 and metrics["demo"]["n"] == 40
    assert metrics["demo"]["calibrated"] is True
    assert 0.0 <= metrics["demo"]["em"] <= metrics["demo"]["recall_at_20"] <= 1.0

    dense = params.finetune.model_copy(update={"retriever": "dense"})
    with pytest.raises(FileNotFoundError, match="pre-training checkpoint"):
        finetune_openqa(params.run, dense)


def test_a_second_training_in_one_run_is_refused_while_the_first_writes_its_checkpoints(run_root):
    params = tiny_params(run_root)
    finetune = params.finetune.model_copy(update={"retriever": "bm25"})
    checkpoints = run_root / "checkpoints"
    with writer_lock(checkpoints, "the run's checkpoints"):
        with pytest.raises(WriterBusy, match=f"^{checkpoints}: another writer holds the run's checkpoints now"):
            finetune_openqa(params.run, finetune)
    assert list(checkpoints.iterdir()) == []
    assert finetune_openqa(params.run, finetune)["checkpoint"].startswith(str(checkpoints / "finetune"))
