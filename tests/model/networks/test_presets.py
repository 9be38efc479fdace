import pytest

from realm.model.networks.bert_dir import BertDirError
from realm.model.networks.presets import record_model_preset
from realm.model.tokenization import load_tokenizer
from realm.schemas import ArtifactError
from realm.schemas.run_layout import RunLayout
from tests.bert_fixture import save_tiny_bert


def _prepared_with(layout: RunLayout, model_dir: str | None) -> None:
    tokenizer = load_tokenizer(model_dir)
    layout.root.mkdir(parents=True, exist_ok=True)
    layout.vocabulary_file.write_text(f'{{"sha256": "{tokenizer.vocabulary_sha256}", "source": "{tokenizer.model_dir}"}}')


def test_a_training_stage_refuses_blocks_cut_with_another_vocabulary_in_one_line(tmp_path):
    bert = str(save_tiny_bert(tmp_path / "bert"))
    layout = RunLayout.at(tmp_path / "run")
    _prepared_with(layout, None)
    record_model_preset(layout, "random-2l", bert_dir=bert, check_vocabulary=False)  # realm run: prepares again first
    with pytest.raises(ArtifactError, match="its blocks and examples were cut with the vocabulary of .*, not that of "
                       f"--bert {bert}") as refused:
        record_model_preset(layout, "random-2l", bert_dir=bert)
    assert "\n" not in str(refused.value)
    _prepared_with(layout, bert)
    record_model_preset(layout, "random-2l", bert_dir=bert)


def test_a_run_prepared_before_vocabularies_were_recorded_is_not_checked_and_a_bad_bert_is_refused(tmp_path):
    layout = RunLayout.at(tmp_path / "run")
    record_model_preset(layout, "random-2l")
    with pytest.raises(BertDirError, match="no such directory"):
        record_model_preset(RunLayout.at(tmp_path / "other"), "random-2l", bert_dir=str(tmp_path / "absent"))
