from realm.model.networks.inputs import joint_sequence, pad_batch
from realm.model.networks.question_match import (
    content_stems,
    question_match_flags,
    question_stems,
    question_word_matches,
    words,
)


def test_a_word_is_a_wordpiece_and_its_continuations():
    assert words(["the", "poly", "##nu", "##cle", "##otide", "chain", "##s"]) == [
        ("the", 0, 1), ("polynucleotide", 1, 5), ("chains", 5, 7),
    ]


def test_content_stems_leave_out_stop_words_and_punctuation():
    stems = content_stems(["in", "which", "year", "was", "the", "prize", "shared", "?"])
    assert stems == {"which", "year", "prize", "share"}


def test_body_wordpieces_of_a_word_the_question_says_are_flagged(tokenizer):
    question = tokenizer.encode("With whom did Marie Curie share the Nobel Prize in Physics?")
    body = tokenizer.encode("She shared the 1903 Nobel Prize in Physics with Pierre Curie and won physics again.")
    tokens = tokenizer.convert_ids_to_tokens(body)
    flags = question_word_matches(tokenizer, question_stems(tokenizer, question), body)
    flagged = [token for token, flag in zip(tokens, flags) if flag]
    # "shared" is "share" stemmed; "the", "in", "with" are stop words; matching is uncased.
    assert flagged == ["shared", "nobel", "prize", "physics", "cu", "##rie", "physics"]


def test_every_wordpiece_of_a_matched_word_is_flagged_and_no_part_of_another(tokenizer):
    question = tokenizer.encode("what do polynucleotide chains form")
    body = tokenizer.encode("two polynucleotide strands; a polymer")
    tokens = tokenizer.convert_ids_to_tokens(body)
    flags = question_word_matches(tokenizer, question_stems(tokenizer, question), body)
    word = [i for i, (first, _, _) in enumerate(words(tokens)) if first == "polynucleotide"]
    assert word, tokens
    _, first, end = words(tokens)[word[0]]
    assert end - first > 1  # split into several wordpieces by this vocabulary
    assert [i for i, flag in enumerate(flags) if flag] == list(range(first, end))


def test_flags_of_padded_joint_inputs_sit_at_each_row_s_body(tokenizer):
    question = tokenizer.encode("which river flows through paris")
    long_question = tokenizer.encode("which city on the river seine is the capital of france")
    body = tokenizer.encode("the seine flows through paris")
    # The third: the null document; the last: the body cut by `join` to "the seine flows".
    pairs = [(question, body), (long_question, body), (question, []), (question, body)]
    kept = [len(body), len(body), 0, 3]
    joint = pad_batch(
        [joint_sequence(tokenizer, q, z, max_length=len(q) + 3 + n) for (q, z), n in zip(pairs, kept)], tokenizer.pad_id
    )
    flags = question_match_flags(tokenizer, joint, pairs)
    for row, ((q, z), n) in enumerate(zip(pairs, kept)):
        start = len(q) + 2  # [CLS] q [SEP]
        expected = [0] * start + question_word_matches(tokenizer, question_stems(tokenizer, q), z[:n])
        expected += [0] * (joint.input_ids.shape[1] - len(expected))  # [SEP] and padding
        assert flags[row].tolist() == expected
    assert flags[3].sum() == 1  # "flows"; "through paris" were cut
    tokens = tokenizer.convert_ids_to_tokens(body)
    assert [t for t, f in zip(tokens, flags[0, len(question) + 2 :].tolist()) if f] == ["flows", "through", "paris"]
    assert [t for t, f in zip(tokens, flags[1, len(long_question) + 2 :].tolist()) if f] == ["seine"]
    assert not flags[2].any()
