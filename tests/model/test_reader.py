import torch

from realm.model.reader import (
    best_span,
    build_reader,
    enumerate_spans,
    find_gold_spans,
    normalize_answer,
    reader_inputs,
    reader_log_likelihood,
    span_text,
)


def test_normalize_answer():
    assert normalize_answer("The  Beatles!") == "beatles"
    assert normalize_answer("An apple, a Day") == "apple day"


def test_gold_spans_match_whole_words_after_normalisation(tokenizer):
    body = tokenizer.encode("The Beatles played with the artist Art Garfunkel in 1969.")
    spans = find_gold_spans(tokenizer, body, ["the Beatles", "art"])
    texts = {span_text(tokenizer, body, s, e) for s, e in spans}
    assert texts == {"the beatles", "beatles", "art"}  # "art" inside "artist" is not a match


def test_gold_spans_respect_max_width(tokenizer):
    answer = "one two three four five six seven eight nine ten eleven"
    body = tokenizer.encode(f"count {answer} done")
    assert find_gold_spans(tokenizer, body, [answer], max_span_wordpieces=10) == []
    assert len(find_gold_spans(tokenizer, body, [answer], max_span_wordpieces=11)) == 1


def test_spans_lie_inside_the_body_and_are_at_most_ten_wordpieces():
    spans = enumerate_spans(torch.tensor([5, 3]), torch.tensor([12, 4]), max_span=10)
    for row, (start, length) in enumerate([(5, 12), (3, 4)]):
        starts, ends = spans.starts[row][spans.valid[row]], spans.ends[row][spans.valid[row]]
        assert (starts >= start).all() and (ends < start + length).all()
        assert ((ends - starts) < 10).all() and (ends >= starts).all()
        expected = {(s, e) for s in range(start, start + length) for e in range(s, min(s + 10, start + length))}
        assert set(zip(starts.tolist(), ends.tolist())) == expected


def test_reader_log_likelihood_is_logsumexp_of_gold_span_log_softmax(tiny_config, tokenizer):
    reader = build_reader(tiny_config).eval()
    question = tokenizer.encode("who wrote the first algorithm")
    bodies = [tokenizer.encode("ada lovelace wrote it for the engine"), tokenizer.encode("the nile is long")]
    joint, spans = reader_inputs(tokenizer, [(question, body) for body in bodies])
    assert spans.starts[:, 0].tolist() == [len(question) + 2] * 2
    assert spans.valid.sum(1).tolist() == [sum(min(10, len(b) - i) for i in range(len(b))) for b in bodies]
    gold = spans.gold_mask([find_gold_spans(tokenizer, body, ["Ada Lovelace"]) for body in bodies])
    assert gold[0].sum() == 1 and gold[1].sum() == 0

    with torch.no_grad():
        logits = reader.span_logits(joint, spans)
    got = reader_log_likelihood(logits, gold)
    valid_logits = logits[0][spans.valid[0]]
    manual = torch.logsumexp(logits[0][gold[0]] - torch.logsumexp(valid_logits, 0), 0)
    torch.testing.assert_close(got[0], manual)
    assert got[1] < -1e29  # no gold span: no weight in the marginal

    best = best_span(torch.tensor([2.0, -2.0]), logits, spans, torch.tensor([True, True]))
    assert best.end - best.start < 10
    assert span_text(tokenizer, bodies[best.candidate], best.start, best.end)


def test_spans_follow_a_body_cut_short_by_the_joint_length(tokenizer):
    question, body = list(range(1000, 1100)), list(range(2000, 2300))
    joint, spans = reader_inputs(tokenizer, [(question, body)])
    kept = joint.input_ids.shape[1] - len(question) - 3
    ends = spans.ends[0][spans.valid[0]]
    assert kept < len(body) and ends.max() == joint.input_ids.shape[1] - 2  # last body wordpiece, before [SEP]
    gold = spans.gold_mask([[(len(body) - 2, len(body) - 1), (0, 1)]])  # the first was cut off
    assert gold.sum() == 1
