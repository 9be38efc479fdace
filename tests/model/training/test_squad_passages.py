from realm.model.index.block_store import BlockStore
from realm.model.networks.reader import span_text
from realm.model.training.squad_passages import passage_documents, squad_passages
from realm.model.training.squad_questions import read_squad
from tests.model.training.squad_fixture import cut_passages, write_squad

MAX_SPAN = 10


def _read(tmp_path, tokenizer):
    questions = read_squad(write_squad(tmp_path / "squad.json"))
    blocks_path = cut_passages(questions, str(tmp_path / "squad" / "blocks"), tokenizer)
    return questions, blocks_path, BlockStore.from_parquet(blocks_path, with_text=True)


def test_the_gold_span_in_the_passage_is_the_marked_answers_text(tmp_path, tokenizer):
    """The Eiffel Tower paragraph is cut into two blocks: each question's passage is the block
    holding its answer, and the reader's gold span there reads as the marked answer."""
    questions, blocks_path, blocks = _read(tmp_path, tokenizer)
    examples, passages = squad_passages(questions, blocks_path, tokenizer, MAX_SPAN)
    eiffel = [b for b in blocks.block_ids.tolist() if blocks.title(b) == "Eiffel Tower"]
    assert len(eiffel) == 2

    def read(question: str) -> list[str]:
        passage = passages.by_question[question]
        body, text = blocks.body_ids(passage.block_id), blocks.text(passage.block_id)
        return [span_text(tokenizer, body, text, start, end) for start, end in passage.spans]

    assert read("In what year was the Eiffel Tower completed?") == ["1889"]
    assert read("Where in Paris is the Eiffel Tower?") == ["the Champ de Mars"]
    # Two annotators marked the same span, a third a longer one: each span once.
    assert read("Whose company built the Eiffel Tower?") == ["Gustave Eiffel", "company of Gustave Eiffel"]
    assert passages.by_question["Where in Paris is the Eiffel Tower?"].block_id != passages.by_question[
        "In what year was the Eiffel Tower completed?"].block_id  # the first sentence, cut from the other two
    assert read("Who designed the Analytical Engine?") == ["Charles Babbage"]
    by_question = {e.question: e for e in examples}
    assert by_question["Whose company built the Eiffel Tower?"].answers == ["Gustave Eiffel", "company of Gustave Eiffel"]
    assert {e.dataset for e in examples} == {"squad"} and passages.blocks_path == blocks_path


def test_a_question_whose_answers_cut_a_word_or_run_past_the_widest_span_is_left_out(tmp_path, tokenizer):
    questions, blocks_path, _ = _read(tmp_path, tokenizer)
    examples, passages = squad_passages(questions, blocks_path, tokenizer, MAX_SPAN)
    assert "What did Ada Lovelace do?" not in passages.by_question
    assert len(examples) == len(passages.by_question) == 4
    # A reader scoring wider spans keeps the long answer.
    wider, _ = squad_passages(questions, blocks_path, tokenizer, 20)
    assert "What did Ada Lovelace do?" in {e.question for e in wider}


def test_the_paragraphs_are_documents_once_each_under_their_articles_titles(tmp_path):
    questions = read_squad(write_squad(tmp_path / "squad.json"))
    documents = passage_documents(questions)
    assert [(d["doc_id"], d["title"], d["source"]) for d in documents] == [
        ("squad:0.0", "Eiffel Tower", "squad"), ("squad:1.0", "Ada Lovelace", "squad")]
    assert documents[0]["text"] == questions[0].context
