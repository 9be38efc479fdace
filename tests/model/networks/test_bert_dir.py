import hashlib
import json
import re

import pytest

from realm.model.networks.bert_dir import BertDirError, check_bert_dir, weights_sha256
from realm.model.tokenization import WordPieceTokenizer, default_model_dir, load_tokenizer
from tests.bert_fixture import VOCABULARY, save_tiny_bert


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return save_tiny_bert(tmp_path_factory.mktemp("bert") / "tiny-bert")


def test_a_saved_bert_for_masked_lm_is_accepted_as_its_absolute_path(bert_dir, monkeypatch):
    monkeypatch.chdir(bert_dir.parent)
    assert check_bert_dir("tiny-bert") == str(bert_dir)


@pytest.mark.parametrize("removed, named", [
    ("config.json", "no config.json"),
    ("model.safetensors", "no model.safetensors or pytorch_model.bin (the weights)"),
    ("vocab.txt", "no vocab.txt or tokenizer.json (the WordPiece vocabulary)"),
])
def test_a_directory_lacking_a_file_is_refused_in_one_line_naming_it(bert_dir, tmp_path, removed, named):
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in bert_dir.iterdir():
        if path.name != removed:
            (copy / path.name).write_bytes(path.read_bytes())
    with pytest.raises(BertDirError, match=re.escape(named)) as refused:
        check_bert_dir(copy)
    assert "\n" not in str(refused.value)


def test_a_directory_of_another_model_or_none_is_refused(bert_dir, tmp_path):
    with pytest.raises(BertDirError, match="no such directory"):
        check_bert_dir(tmp_path / "absent")
    other = tmp_path / "roberta"
    other.mkdir()
    for path in bert_dir.iterdir():
        (other / path.name).write_bytes(path.read_bytes())
    (other / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    with pytest.raises(BertDirError, match="model_type is 'roberta', not 'bert'"):
        check_bert_dir(other)


def test_the_weights_sha256_is_the_weight_file_s_and_sharded_weights_hash_in_order(bert_dir, tmp_path):
    assert weights_sha256(bert_dir) == hashlib.sha256((bert_dir / "model.safetensors").read_bytes()).hexdigest()
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    (sharded / "b.bin").write_bytes(b"second")
    (sharded / "a.bin").write_bytes(b"first")
    (sharded / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": {"x": "b.bin", "y": "a.bin"}}))
    assert weights_sha256(sharded) == hashlib.sha256(b"firstsecond").hexdigest()
    assert weights_sha256(tmp_path) is None


def test_a_vocabulary_is_identified_by_its_tokens_whatever_file_holds_it(bert_dir, tmp_path):
    own = load_tokenizer(str(bert_dir))
    assert own.vocab_size == len(VOCABULARY)
    assert own.vocabulary_sha256 == hashlib.sha256("\n".join(VOCABULARY).encode()).hexdigest()
    assert own.vocabulary_sha256 != load_tokenizer().vocabulary_sha256
    # The default's tokenizer.json and its vocab.txt alone: one vocabulary.
    vocab_only = tmp_path / "vocab-only"
    vocab_only.mkdir()
    (vocab_only / "vocab.txt").write_bytes((default_model_dir() / "vocab.txt").read_bytes())
    assert WordPieceTokenizer(vocab_only).vocabulary_sha256 == load_tokenizer().vocabulary_sha256


def test_a_cased_vocabulary_keeps_case_when_its_tokenizer_config_says_so(bert_dir, tmp_path):
    cased = tmp_path / "cased"
    cased.mkdir()
    (cased / "vocab.txt").write_text("\n".join(VOCABULARY + ["P"]) + "\n")
    uncased = WordPieceTokenizer(cased)
    assert uncased.convert_ids_to_tokens(uncased.encode("P")) == ["p"]
    (cased / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": False}))
    kept = WordPieceTokenizer(cased)
    assert kept.convert_ids_to_tokens(kept.encode("P")) == ["P"]
