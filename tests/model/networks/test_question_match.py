from realm.model.networks.question_match import content_stems, question_stems, question_word_matches, words


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
