import json

import pytest

from realm.model.qa.answer_metrics import answer_in_text, exact_match, normalize_answer
from realm.flows.demo import demo_qa_path
from realm.model.qa.qa_data import QAFormatError, read_qa_file
from realm.pipelines.read_vital import load_vital_summaries


def test_normalisation_drops_case_punctuation_articles_and_spacing():
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("An Apple a day") == "apple day"
    assert exact_match("the Bard", ["Bard of Avon", "bard"])
    assert not exact_match("Bard of", ["Bard of Avon"])


def test_curatedtrec_answers_are_regexes_matched_at_the_start():
    assert exact_match("September", ["Sept?(ember)?|Feb(ruary)?"], "regex")
    assert not exact_match("in September", ["Sept?(ember)?"], "regex")
    assert not exact_match("x", ["(unclosed"], "regex")
    assert answer_in_text("Fashion week is held in February.", ["Feb(ruary)?"], "regex")


def test_answer_in_text_matches_whole_normalised_tokens():
    assert answer_in_text("It was published in 1687, in Latin.", ["1687"])
    assert not answer_in_text("It was published in 16870.", ["1687"])


def test_project_nq_open_webquestions_and_trec_formats(tmp_path):
    (tmp_path / "nq.jsonl").write_text(
        json.dumps({"question": "q1", "answers": ["a1"], "dataset": "nq"}) + "\n" + json.dumps({"question": "q2", "answer": ["a2", "b2"]}) + "\n"
    )
    (tmp_path / "wq.json").write_text(
        json.dumps([{"qText": "q3", "answers": ["a3"]}, {"utterance": "q4", "targetValue": '(list (description "Jazmine Grimaldi") (description Monaco))'}])
    )
    (tmp_path / "trec.tsv").write_text("q5\tSept?(ember)?\n")
    nq = read_qa_file(tmp_path / "nq.jsonl")
    assert [(e.question, e.answers, e.dataset) for e in nq] == [("q1", ["a1"], "nq"), ("q2", ["a2", "b2"], "nq")]
    wq = read_qa_file(tmp_path / "wq.json")
    assert [(e.question, e.answers, e.dataset) for e in wq] == [("q3", ["a3"], "wq"), ("q4", ["Jazmine Grimaldi", "Monaco"], "wq")]
    (trec,) = read_qa_file(tmp_path / "trec.tsv", dataset="ct")
    assert (trec.answers, trec.answer_type, trec.dataset) == (["Sept?(ember)?"], "regex", "ct")


def test_bad_records_name_the_file_and_line(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"question": "ok", "answers": ["x"]}\n{"question": "no answers"}\n')
    with pytest.raises(QAFormatError, match=r"bad.jsonl:2: answers must be"):
        read_qa_file(tmp_path / "bad.jsonl")
    (tmp_path / "bad.tsv").write_text("question without tab\n")
    with pytest.raises(QAFormatError, match=r"bad.tsv:1"):
        read_qa_file(tmp_path / "bad.tsv")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("ct.tsv", "when was it\t19(03\n", r"ct.tsv:1: answer regex '19\(03' does not compile"),
        ("latin.jsonl", '{"question": "ok", "answers": ["x"]}\n'.encode() + b'{"question": "caf\xe9"}\n',
         r"latin.jsonl:2: not UTF-8"),
        ("empty.jsonl", "\n\n", r"empty.jsonl: holds no questions"),
        ("empty.json", "[]", r"empty.json: holds no questions"),
        ("escape.jsonl", '{"question": "q", "answers": ["a"], "dataset": "../../outside"}\n',
         r"escape.jsonl:1: dataset name '../../outside' must be"),
        ("hidden.jsonl", '{"question": "q", "answers": ["a"], "dataset": ".hidden"}\n', r"hidden.jsonl:1: dataset name"),
        ("wq.json", '[{"qText": "q", "answers": ["a"]}, "oops"]', r"wq.json:\[1\]: expected a JSON object, got str"),
        ("wq.json", '[{"utterance": "q", "targetValue": 7}]', r"wq.json:\[0\]: targetValue must be a string, got 7"),
        ("questions.csv", "question,answer\nwho,me\n", r"questions.csv: unknown question file suffix '.csv': .jsonl"),
    ],
)
def test_unusable_question_files_are_refused_naming_the_file_line_and_reason(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(QAFormatError, match=message):
        read_qa_file(path)


def test_every_demo_answer_occurs_in_the_vital_corpus():
    summaries = load_vital_summaries()
    # Normalised once: answer_in_text would re-normalise the 6 MB corpus for every question.
    text = " . ".join(f"{s['title']}. {s['extract']}" for s in summaries.values())
    corpus = f" {normalize_answer(text)} "
    demo = read_qa_file(demo_qa_path())
    assert len(demo) >= 40
    assert [e.question for e in demo if not any(f" {normalize_answer(a)} " in corpus for a in e.answers)] == []


@pytest.mark.parametrize(
    ("name", "content"),
    [("q.jsonl", '{"question": "q", "answers": ["a"]}\n'), ("wq.json", '[{"qText": "q", "answers": ["a"]}]'), ("ct.tsv", "q\ta\n")],
)
def test_a_question_file_starting_with_a_byte_order_mark_is_read(tmp_path, name, content):
    """Windows editors start a UTF-8 file with one; it is not part of the first question."""
    (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + content.encode())
    (example,) = read_qa_file(tmp_path / name)
    assert (example.question, example.answers) == ("q", ["a"])
