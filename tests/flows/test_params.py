import dataclasses
import typing

import pytest

from realm.cli.settings import with_overrides
from realm.flows.finetune_openqa import finetune_openqa
from realm.flows.ict_warm_start import ict_warm_start
from realm.flows.params import FinetuneParams, IctParams, PipelineParams, PretrainParams, ReaderWarmupParams
from realm.flows.reader_warmup import reader_warmup
from realm.flows.realm_pretrain import realm_pretrain
from realm.model.networks.config import ModelConfig
from realm.model.training.stage_settings import FinetuneConfig, IctConfig, PretrainConfig, ReaderWarmupConfig

# (the stage's flow, its field in the whole pipeline's form, the settings its trainer reads, what only the flow reads)
STAGES = [
    (ict_warm_start, "ict", IctConfig, set()),
    (realm_pretrain, "pretrain", PretrainConfig, set()),
    (reader_warmup, "warmup", ReaderWarmupConfig, set()),
    (finetune_openqa, "finetune", FinetuneConfig, {"qa_train", "retriever"}),
]
# Names a stage setting shares with ModelConfig at another default, and why each is a setting of its own.
OWN_DEFAULTS = {
    "retrieval_pooling": "the ICT stage starts the towers as the sentence encoder (mean-pooled); towers built from "
    "a model preset alone keep REALM's [CLS]",
}


def _forms(flow, stage: str) -> list[type]:
    """The forms a stage's settings are given in: its flow's `params` and the pipeline form's field."""
    return [typing.get_type_hints(flow.fn)["params"], PipelineParams.model_fields[stage].annotation]


@pytest.mark.parametrize(("flow", "stage", "config", "flow_only"), STAGES)
def test_each_stage_setting_is_defined_once_for_the_trainer_the_flow_and_the_cli(flow, stage, config, flow_only):
    """Every field of the flow's forms (and `--param`) is the trainer's setting with its type,
    bounds and default, but for what only the flow reads."""
    for form in _forms(flow, stage):
        assert set(form.model_fields) - set(config.model_fields) == flow_only
        assert set(config.model_fields) <= set(form.model_fields)
        for name, field in config.model_fields.items():
            mine = form.model_fields[name]
            assert (mine.annotation, mine.default, mine.metadata) == (field.annotation, field.default, field.metadata), name
    form = _forms(flow, stage)[0]
    # Counts doubled, rates and shares halved: each stays within its bounds (a share's is 1).
    changed = {name: f.default * 2 if type(f.default) is int else f.default / 2
               for name, f in config.model_fields.items() if type(f.default) in (int, float)}
    overridden = with_overrides(form(), [f"{name}={value}" for name, value in changed.items()])
    assert config(**overridden.model_dump(include=set(config.model_fields))) == config(**changed)


def test_a_stage_setting_named_as_a_model_config_field_has_its_default_unless_said_why_not():
    model_defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    differing = {
        name for config in (IctConfig, PretrainConfig, FinetuneConfig, ReaderWarmupConfig)
        for name, field in config.model_fields.items() if name in model_defaults and field.default != model_defaults[name]
    }
    assert differing == set(OWN_DEFAULTS)
    assert FinetuneConfig.model_fields["span_features"].default is model_defaults["span_features"] is True


def test_the_default_run_preset_is_the_flow_default_but_for_what_it_says_it_changes():
    default = PipelineParams.preset("default")
    assert (default.pretrain, default.warmup) == (PretrainParams(steps=0), ReaderWarmupParams(questions=0))
    assert (default.run, default.ict, default.finetune) == (PipelineParams().run, IctParams(), FinetuneParams())


@pytest.mark.parametrize("setting", ["retriever_corpus_softmax=true"])
def test_a_dense_only_fine_tuning_setting_with_the_bm25_retriever_is_refused(setting):
    """A BM25 run has no query tower and reads BM25's candidates already: the setting would be
    silently ignored, so it is refused by name instead."""
    name = setting.partition("=")[0]
    with pytest.raises(SystemExit, match=f"^--param: {name} needs retriever 'dense'; with 'bm25' it would do nothing$"):
        with_overrides(FinetuneParams(), ["retriever=bm25", setting])
    assert getattr(with_overrides(FinetuneParams(), [setting]), name)  # dense: accepted


def test_the_corpus_early_update_left_at_its_default_is_off_for_bm25_without_a_word():
    """On by default for a dense index, it is no error to leave it so with BM25; asked for, it is refused (above)."""
    assert with_overrides(FinetuneParams(), ["retriever=bm25"]).retriever_corpus_softmax is None
    assert with_overrides(FinetuneParams(), ["retriever=bm25", "retriever_corpus_softmax=false"]).retriever == "bm25"


def test_one_set_of_settings_serves_a_bm25_row_with_its_dense_only_settings_back_at_their_defaults():
    """What `realm reproduce` gives each row: the dense rows keep every setting, the BM25 row
    has the ones that act through a query tower turned back (and says which), and both are
    validated, so a bad update fails there instead of inside a trainer."""
    shared = FinetuneParams(retriever_corpus_softmax=True, epochs=2)
    dense, dropped = shared.for_retriever("dense", qa_train=["train.jsonl"])
    assert (dense.retriever, dense.retriever_corpus_softmax, dense.epochs) == ("dense", True, 2)
    assert dense.qa_train == ["train.jsonl"] and dropped == []
    bm25, dropped = shared.for_retriever("bm25", qa_train=["train.jsonl"])
    assert (bm25.retriever, bm25.retriever_corpus_softmax, bm25.epochs) == ("bm25", None, 2)
    assert dropped == ["retriever_corpus_softmax"]
    assert FinetuneParams().for_retriever("bm25")[1] == []
    with pytest.raises(ValueError, match="num_read <= num_candidates"):
        shared.for_retriever("dense", num_candidates=3)


def test_a_warm_up_and_a_fine_tuning_that_build_different_readers_are_refused_before_any_work():
    with pytest.raises(ValueError, match="warmup and finetune set span_features differently; fine-tuning starts from"):
        PipelineParams(warmup=ReaderWarmupParams(questions=100), finetune=FinetuneParams(span_features=False))
    assert PipelineParams(warmup=ReaderWarmupParams(questions=0), finetune=FinetuneParams(span_features=False))
    both = PipelineParams(warmup=ReaderWarmupParams(questions=100, span_features=False), finetune=FinetuneParams(span_features=False))
    assert not both.finetune.span_features and not both.warmup.span_features


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"epochs": float("inf")}, "finite number"),
        ({"learning_rate": float("nan")}, "finite number"),
        ({"weight_decay": -5}, "greater than or equal to 0"),
        ({"max_question_wordpieces": 0}, "greater than or equal to 1"),
    ],
)
def test_a_fine_tuning_setting_no_step_could_train_with_is_refused_by_the_form(update, message):
    with pytest.raises(ValueError, match=message):
        FinetuneParams(**update)



def test_the_gpu_preset_pre_trains_as_the_paper_does():
    """Both towers learn, the index is rebuilt every few hundred steps while pre-training runs
    (several times, each before the towers stop learning), at the paper's query and block lengths."""
    gpu = PipelineParams.preset("gpu").pretrain
    assert gpu.doc_tower == "whole"
    assert 100 <= gpu.refresh_every <= 1000 and (gpu.steps - gpu.retriever_frozen_steps) // gpu.refresh_every >= 3
    assert (gpu.max_query_wordpieces, gpu.max_block_wordpieces) == (96, 288)
