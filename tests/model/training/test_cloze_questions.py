from realm.model.training.cloze_questions import cloze_question, cloze_questions
from realm.schemas.examples import PRETRAIN_EXAMPLES
from realm.schemas.io import write_table

SENTENCES = [
    # (example_id, text, salient spans (start, end, label), index of the masked span or None, forbidden)
    (3, "Neil Armstrong commanded Apollo 11 in July 1969.", [(0, 14, "PERSON"), (38, 47, "DATE")], 1, [30, 31]),
    (1, "The Nile flows north through Egypt.", [(29, 34, "GPE")], 0, [10]),
    (2, "It has no salient span at all.", [], None, [20]),
    (5, "Paramecium is a genus of ciliates.", [(0, 10, "ORG")], 0, [50]),
]


def _write(path, tokenizer, sentences=SENTENCES) -> str:
    rows = []
    for example_id, text, spans, masked, forbidden in sentences:
        token_spans = [
            {"start": start, "end": end, "token_start": len(tokenizer.encode(text[:start])),
             "token_end": len(tokenizer.encode(text[:end])), "label": label, "source": "ner"}
            for start, end, label in spans
        ]
        chosen = [] if masked is None else list(range(token_spans[masked]["token_start"], token_spans[masked]["token_end"]))
        rows.append({"example_id": example_id, "origin_block_id": forbidden[0], "forbidden_block_ids": forbidden,
                     "text": text, "token_ids": tokenizer.encode(text), "spans": token_spans,
                     "masked_token_positions": chosen})
    write_table(str(path / "pretrain_examples.parquet"), rows, PRETRAIN_EXAMPLES)
    return str(path)


def test_the_masked_span_becomes_the_wh_word_of_its_label():
    text = "Neil Armstrong commanded Apollo 11 in July 1969."
    assert cloze_question(text, 0, 14, "PERSON") == "who commanded Apollo 11 in July 1969."
    assert cloze_question(text, 38, 47, "DATE") == "Neil Armstrong commanded Apollo 11 in when."
    assert cloze_question(text, 25, 34, "PRODUCT") == "Neil Armstrong commanded what in July 1969."


def test_each_sentence_with_a_masked_span_asks_for_it_and_excludes_its_own_blocks(tmp_path, tokenizer):
    questions = cloze_questions(_write(tmp_path, tokenizer), count=10, seed=0, max_question_wordpieces=64)
    by_answer = {q.answers[0]: q for q in questions}
    assert sorted(by_answer) == ["Egypt", "July 1969", "Paramecium"]  # the span the example masks, not the first
    assert by_answer["July 1969"].question == "Neil Armstrong commanded Apollo 11 in when."
    assert by_answer["July 1969"].excluded_block_ids == (30, 31)
    assert by_answer["Egypt"].question == "The Nile flows north through where."
    assert by_answer["Paramecium"].question == "what is a genus of ciliates."
    assert {q.dataset for q in questions} == {"cloze"}


def test_the_draw_depends_on_the_seed_not_on_the_order_of_the_rows(tmp_path, tokenizer):
    forward = _write(tmp_path / "forward", tokenizer)
    backward = _write(tmp_path / "backward", tokenizer, SENTENCES[::-1])
    drawn = {seed: [q.question for q in cloze_questions(forward, 2, seed, 64)] for seed in range(6)}
    for seed, questions in drawn.items():
        assert len(questions) == 2
        assert questions == [q.question for q in cloze_questions(backward, 2, seed, 64)]
    assert len({tuple(q) for q in drawn.values()}) > 1


def test_sentences_longer_than_a_question_may_be_are_left_out(tmp_path, tokenizer):
    """The wh-word may take a wordpiece more than the span did: a sentence needs one spare."""
    lengths = [len(tokenizer.encode(text)) for _, text, _, _, _ in SENTENCES]
    assert lengths[3] == max(lengths) > max(lengths[:3]) + 1  # "Paramecium is a genus of ciliates."
    kept = cloze_questions(_write(tmp_path, tokenizer), 10, 0, max_question_wordpieces=lengths[3])
    assert sorted(q.answers[0] for q in kept) == ["Egypt", "July 1969"]
