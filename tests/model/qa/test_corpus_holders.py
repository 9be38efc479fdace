import numpy as np

from realm.model.index.block_store import BlockStore
from realm.model.qa.corpus_holders import answer_holders
from realm.model.qa.gold_spans import gold_spans
from realm.model.qa.qa_data import QAExample
from tests.model.corpus_fixture import CORPUS_QUESTIONS


def test_every_block_holding_an_answer_is_found_by_the_gold_span_rule(tokenizer, blocks_table):
    blocks = BlockStore(blocks_table)
    block_ids = blocks_table["block_id"].to_numpy()
    examples = [
        *CORPUS_QUESTIONS,
        QAExample("Which city does the Seine flow through?", ["Paris"], "test", excluded_block_ids=(-7,)),
        QAExample("Which river?", ["seine"], "test"),  # in both bodies: "river Seine", "The Seine"
        QAExample("Who composed it?", ["Mozart"], "test"),  # in no block
        QAExample("Which art?", ["art"], "test"),  # no block holds the word whole ("Earth", "Mediterranean")
        QAExample("Which years?", [r"\d{4}", "(unclosed"], "trec", "regex"),
    ]
    holders = answer_holders(tokenizer, blocks, block_ids, examples, max_span_wordpieces=10)

    assert [h.tolist() for h in holders] == [
        [-7, 11],  # "Paris" in the Paris and Seine blocks' bodies
        [57],
        [68],  # "the Nile", and normalised "nile"
        [-42],  # the regex, over the block's text
        [11],  # the Paris block is excluded
        [-7, 11],
        [],
        [],
        [-42],  # "1903", "1911"; the broken pattern matches nothing
    ]
    # the same blocks as testing every block span by span
    for example, found in zip(examples, holders):
        exhaustive = [
            int(b) for b in sorted(block_ids)
            if int(b) not in example.excluded_block_ids and gold_spans(tokenizer, blocks, int(b), example, 10)
        ]
        assert found.tolist() == exhaustive


def test_only_the_given_blocks_are_searched(tokenizer, blocks_table):
    blocks = BlockStore(blocks_table)
    holders = answer_holders(tokenizer, blocks, np.array([11, 23]), [CORPUS_QUESTIONS[0], CORPUS_QUESTIONS[3]], 10)
    assert [h.tolist() for h in holders] == [[11], []]


def test_a_regex_match_running_past_a_blocks_end_hides_no_other_block(tokenizer, blocks_table):
    """Each block's text is searched on its own: a pattern that could span two blocks' texts
    joined still finds the second block's own match, and "^" anchors at each block's start."""
    blocks = BlockStore(blocks_table)
    block_ids = blocks_table["block_id"].to_numpy()
    examples = [
        QAExample("Where does the Nile flow?", [r"[^,]+ Sea"], "trec", "regex"),
        QAExample("Who was deaf?", [r"^Ludwig van Beethoven"], "trec", "regex"),
    ]
    holders = answer_holders(tokenizer, blocks, block_ids, examples, max_span_wordpieces=10)
    # "mountain above sea", "the Mediterranean Sea". Over the joined texts, "[^,]+" ran from the
    # Paris block into Everest's and from Curie's into the Nile's, so neither was tested.
    assert [h.tolist() for h in holders] == [[23, 68], [-3]]
