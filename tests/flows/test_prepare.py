"""The prepare stage's cached result keys on its input files' content, not their names."""

import json
import logging

from realm.flows.caching import CACHE_DIR
from realm.flows.params import PrepareParams, RunParams
from realm.flows.prepare import realm_prepare

IN_PROCESS = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
DOCUMENTS = [
    {"doc_id": "d:1", "title": "Apollo 11", "text": "Neil Armstrong commanded Apollo 11. It landed on the Moon in 1969."},
    {"doc_id": "d:2", "title": "Vostok 1", "text": "Yuri Gagarin flew Vostok 1 in 1961. He orbited the Earth once."},
]


def write_documents(path, documents):
    path.write_text("".join(json.dumps(document) + "\n" for document in documents))


def test_an_input_edited_in_place_is_prepared_again_and_the_log_says_which(tmp_path, caplog):
    corpus = tmp_path / "corpus.jsonl"
    write_documents(corpus, DOCUMENTS[:1])
    run = RunParams(output=str(tmp_path / "run"))
    params = PrepareParams(corpus="documents", input=str(tmp_path / "*.jsonl"), beam_args=IN_PROCESS)

    assert realm_prepare(run, params)["chunk"]["documents"] == 1
    write_documents(corpus, DOCUMENTS)  # the same name, one document more
    with caplog.at_level(logging.INFO):
        assert realm_prepare(run, params)["chunk"]["documents"] == 2
    assert f"realm-prepare-corpus: {corpus} changed since its last cached run; running the stage again" in caplog.messages

    entries = sorted((tmp_path / "run" / CACHE_DIR).iterdir())
    assert len(entries) == 2
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert realm_prepare(run, params)["chunk"]["documents"] == 2  # unchanged: the cached result
    assert sorted((tmp_path / "run" / CACHE_DIR).iterdir()) == entries
    assert any("done before with these inputs and code" in message for message in caplog.messages)
