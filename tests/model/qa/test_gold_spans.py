from realm.model.networks.reader import span_text
from realm.model.qa.gold_spans import (
    answer_wordpieces, find_gold_spans, holds_regex_span, regex_gold_spans, wordpiece_spans,
)


def test_gold_spans_match_whole_words_after_normalisation(tokenizer):
    text = "The Beatles played with the artist Art Garfunkel in 1969."
    body = tokenizer.encode(text)
    spans = find_gold_spans(tokenizer, body, ["the Beatles", "art"])
    texts = {span_text(tokenizer, body, text, s, e) for s, e in spans}
    assert texts == {"The Beatles", "Beatles", "Art"}  # "art" inside "artist" is not a match


def test_every_occurrence_is_found_to_the_body_s_last_wordpiece(tokenizer):
    body = tokenizer.encode("in 1969 and again in 1969")
    assert find_gold_spans(tokenizer, body, ["1969"]) == [(1, 1), (5, 5)]
    assert find_gold_spans(tokenizer, body, ["again in 1969"]) == [(3, 5)]
    assert find_gold_spans(tokenizer, body, ["in 1969 and again in 1969 too"]) == []  # longer than the body
    assert find_gold_spans(tokenizer, body, ["in 1969 and again in 1969 and then never"]) == []
    assert wordpiece_spans(tokenizer, body, [[]]) == []


def test_answers_encoded_once_are_each_variant_once_and_find_the_same_spans(tokenizer):
    answers = ["The Beatles", "the Beatles", "!!!"]  # one variant each way; "!!!" normalises to nothing
    encoded = answer_wordpieces(tokenizer, answers, max_span_wordpieces=10)
    assert sorted(encoded) == sorted([tokenizer.encode("the beatles"), tokenizer.encode("beatles"), tokenizer.encode("!!!")])
    body = tokenizer.encode("The Beatles met the beatles fans")
    assert wordpiece_spans(tokenizer, body, encoded) == find_gold_spans(tokenizer, body, answers) == [(0, 1), (1, 1), (3, 4), (4, 4)]


def test_span_text_is_the_block_text_as_written(tokenizer):
    text = "Jay-Z paid $1,000,000 to the U.S. Treasury in São Paulo."
    body = tokenizer.encode(text)

    def answer(words: str) -> str:
        (start, end), *_ = find_gold_spans(tokenizer, body, [words])
        return span_text(tokenizer, body, text, start, end)

    assert answer("jay-z") == "Jay-Z"
    assert answer("1,000,000") == "1,000,000"
    assert answer("u.s.") == "U.S."
    assert answer("sao paulo") == "São Paulo"  # the uncased vocabulary strips the accent; the answer keeps it
    # A text that does not tokenize to the body (not a block's own text): decoded wordpieces instead.
    assert span_text(tokenizer, body, "something else", 0, 2) == "jay - z"


def test_gold_spans_respect_max_width(tokenizer):
    answer = "one two three four five six seven eight nine ten eleven"
    body = tokenizer.encode(f"count {answer} done")
    assert find_gold_spans(tokenizer, body, [answer], max_span_wordpieces=10) == []
    assert len(find_gold_spans(tokenizer, body, [answer], max_span_wordpieces=11)) == 1


def test_regex_answers_mark_the_spans_whose_block_text_the_pattern_matches_in_full(tokenizer):
    text = "Marie Curie won two Nobel Prizes, in 1903 and 1911; Curium is named after her in the U.S. for $1,000."
    body = tokenizer.encode(text)

    def texts(patterns):
        return {span_text(tokenizer, body, text, s, e) for s, e in regex_gold_spans(tokenizer, body, text, patterns)}

    assert texts([r"19(03|11)"]) == {"1903", "1911"}  # not "1903 and 1911": a prefix match is no target
    assert texts([r"nobel\s+prizes?", "curie"]) == {"Nobel Prizes", "Curie"}
    assert texts([r"U\.?S\.?"]) == {"U.S", "U.S."}  # as written: decoded wordpieces read "u. s."
    assert texts([r"\$?1,?000"]) == {"$1,000", "1,000"}
    assert texts(["cur"]) == set()  # only inside words ("curie", "curium")
    assert texts(["(unclosed"]) == set()


def test_a_block_holds_a_regex_answer_where_some_whole_word_span_matches(tokenizer):
    text = "Marie Curie won two Nobel Prizes, in 1903 and 1911."
    body = tokenizer.encode(text)
    assert holds_regex_span(tokenizer, body, text, [r"19(03|11)"])
    assert not holds_regex_span(tokenizer, body, text, ["cur"])  # the text has it, but only inside a word
    assert not holds_regex_span(tokenizer, body, text, ["(unclosed"])
