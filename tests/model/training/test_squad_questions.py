import hashlib

import pytest

from realm.model.qa.qa_data import QAFormatError
from realm.model.training.squad_questions import draw_questions, read_squad
from tests.model.training.squad_fixture import ARTICLES, squad_json, write_squad


def test_each_question_keeps_its_paragraph_its_title_and_every_marked_answer(tmp_path):
    questions = read_squad(write_squad(tmp_path / "squad.json"))
    assert [q.id for q in questions] == ["e1", "e2", "e3", "a1", "a2"]
    built = questions[1]
    assert built.question == "In what year was the Eiffel Tower completed?"
    assert built.title == "Eiffel Tower" and built.paragraph_id == "squad:0.0"
    assert built.context == ARTICLES[0][1][0][0]
    assert built.answers == ((built.context.index("1889"), "1889"),)
    assert questions[0].answers[0] == questions[0].answers[1] == (124, "Gustave Eiffel")  # one per annotator
    assert questions[3].paragraph_id == "squad:1.0"


def test_an_answer_that_is_not_at_its_offset_is_refused_naming_its_question(tmp_path):
    records = squad_json()
    records["data"][0]["paragraphs"][0]["qas"][1]["answers"][0]["answer_start"] += 1
    path = write_squad(tmp_path / "squad.json", records)
    with pytest.raises(QAFormatError) as refused:
        read_squad(path)
    message = str(refused.value)
    assert message.startswith(f"{path}: data[0].paragraphs[0].qas[1] (question e2): answer 0 '1889' is not at character")
    assert "\n" not in message


def test_a_record_missing_a_field_is_refused_naming_it(tmp_path):
    records = squad_json()
    del records["data"][1]["paragraphs"][0]["qas"][0]["question"]
    with pytest.raises(QAFormatError, match=r"data\[1\]\.paragraphs\[0\]\.qas\[0\] \(question a1\): 'question' must be str"):
        read_squad(write_squad(tmp_path / "squad.json", records))


def test_a_file_without_the_expected_sha256_is_refused(tmp_path):
    path = write_squad(tmp_path / "squad.json")
    digest = hashlib.sha256((tmp_path / "squad.json").read_bytes()).hexdigest()
    assert len(read_squad(path, digest)) == 5
    with pytest.raises(QAFormatError, match=f"sha256 {digest}, not the expected 0+"):
        read_squad(path, "0" * 64)


def test_the_draw_follows_the_seed_and_takes_a_question_text_once(tmp_path):
    records = squad_json()
    records["data"][1]["paragraphs"][0]["qas"][1]["question"] = "Who designed the Analytical Engine?"  # a1's again
    questions = read_squad(write_squad(tmp_path / "squad.json", records))
    every = draw_questions(questions, 10, seed=0)
    assert len(every) == 4 and len({q.question for q in every}) == 4
    assert draw_questions(questions, 2, seed=0) == every[:2]
    assert [q.id for q in draw_questions(questions, 10, seed=1)] != [q.id for q in every]
