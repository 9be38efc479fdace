import json
import math

import pytest

from realm.flows.demo import demo_qa_path
from realm.flows.evaluate import evaluate
from realm.flows.finetune_openqa import finetune_openqa
from realm.flows.params import EvaluateParams
from realm.model.checkpoint import load_components
from tests.flows.conftest import tiny_params


def test_bm25_baseline_fine_tunes_the_reader_alone_and_evaluates_with_bm25_evidence(run_root, tmp_path):
    """The BERT-Baseline needs no ICT or pre-training: BM25 over the blocks plus a reader."""
    params = tiny_params(run_root)
    finetune = params.finetune.model_copy(update={"retriever": "bm25"})
    result = finetune_openqa(params.run, finetune)
    assert result["training_questions"] > 0
    assert result["step"] == math.ceil(result["training_questions"] / 2) and result["index"].startswith(str(run_root / "bm25"))
    assert sorted(load_components(result["checkpoint"])) == ["reader"]

    questions = tmp_path / "qa.jsonl"
    questions.write_text("\n".join(
        json.dumps({"question": q, "answers": a, "dataset": "mini"})
        for q, a in (("Where is the Eiffel Tower?", ["Paris"]), ("What is the capital of France?", ["Paris"]))
    ))
    metrics = evaluate(params.run, EvaluateParams(qa=[str(questions), str(demo_qa_path())]))
    assert metrics["mini"]["n"] == 2 and metrics["demo"]["n"] == 40
    assert 0.0 <= metrics["demo"]["em"] <= metrics["demo"]["recall_at_20"] <= 1.0

    dense = params.finetune.model_copy(update={"retriever": "dense"})
    with pytest.raises(FileNotFoundError, match="pre-training checkpoint"):
        finetune_openqa(params.run, dense)


def test_fine_tuning_settings_are_defined_once_for_the_trainer_the_flow_and_the_cli():
    """The flow's form (and `--param`) is the trainer's settings class plus the data to read."""
    from realm.cli.main import _with_overrides
    from realm.flows.params import FinetuneParams
    from realm.model.finetune_settings import FinetuneConfig

    assert issubclass(FinetuneParams, FinetuneConfig)
    assert set(FinetuneParams.model_fields) - set(FinetuneConfig.model_fields) == {"qa_train", "retriever"}
    for name, field in FinetuneConfig.model_fields.items():
        assert FinetuneParams.model_fields[name].default == field.default, name
    overridden = _with_overrides(FinetuneParams(), ["epochs=2.5", "span_head_learning_rate=1e-3"])
    assert FinetuneConfig(**overridden.model_dump(include=set(FinetuneConfig.model_fields))) == FinetuneConfig(
        epochs=2.5, span_head_learning_rate=1e-3
    )
