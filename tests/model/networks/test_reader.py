import dataclasses

import pytest
import torch

from realm.model.networks.entity_types import ENTITY_TYPE_IDS
from realm.model.networks.inputs import padded_length
from realm.model.networks.marginal import LOG_ZERO
from realm.model.networks.reader import (
    best_span,
    build_reader,
    enumerate_spans,
    joint_reader_loss,
    joint_span_logits,
    reader_inputs,
    span_logits_by_length,
)
from realm.model.qa.gold_spans import find_gold_spans


def untyped(bodies):
    """Entity types of bodies with no named entity in them."""
    return [[0] * len(body) for body in bodies]


def test_spans_lie_inside_the_body_and_are_at_most_ten_wordpieces():
    spans = enumerate_spans(torch.tensor([5, 3]), torch.tensor([12, 4]), max_span=10)
    for row, (start, length) in enumerate([(5, 12), (3, 4)]):
        starts, ends = spans.starts[row][spans.valid[row]], spans.ends[row][spans.valid[row]]
        assert (starts >= start).all() and (ends < start + length).all()
        assert ((ends - starts) < 10).all() and (ends >= starts).all()
        expected = {(s, e) for s in range(start, start + length) for e in range(s, min(s + 10, start + length))}
        assert set(zip(starts.tolist(), ends.tolist())) == expected


def test_joint_loss_is_one_softmax_over_every_span_of_every_block_plus_its_retrieval_logit(tiny_config, tokenizer):
    """Brute force over (block, span) pairs: logit = span score + the block's retrieval logit;
    loss = −log Σ_gold exp / Σ_all exp; the block without the answer is in the denominator."""
    reader = build_reader(tiny_config).eval()
    question = tokenizer.encode("who wrote the first algorithm")
    texts = ["ada lovelace wrote it for the engine", "the nile is long"]
    bodies = [tokenizer.encode(t) for t in texts]
    joint, spans = reader_inputs(tokenizer, [(question, body) for body in bodies], untyped(bodies))
    assert spans.starts[:, 0].tolist() == [len(question) + 2] * 2
    assert spans.valid.sum(1).tolist() == [sum(min(10, len(b) - i) for i in range(len(b))) for b in bodies]
    gold = spans.gold_mask([find_gold_spans(tokenizer, body, ["Ada Lovelace"]) for body in bodies])
    assert gold[0].sum() == 1 and gold[1].sum() == 0

    retrieval_logits = torch.tensor([[0.5, 1.5]])  # the block without the answer scores higher
    with torch.no_grad():
        span_logits = reader.span_logits(joint, spans)  # [2, spans]
    joint_logits = joint_span_logits(span_logits[None], retrieval_logits, torch.tensor([[True, True]]))
    loss, answerable = joint_reader_loss(joint_logits, gold.view(1, -1))

    pairs = [
        (float(span_logits[z, i]) + float(retrieval_logits[0, z]), bool(gold[z, i]))
        for z in range(2)
        for i in range(spans.valid.shape[1])
        if spans.valid[z, i]
    ]
    all_scores = torch.tensor([score for score, _ in pairs], dtype=torch.float64)
    gold_scores = torch.tensor([score for score, is_gold in pairs if is_gold], dtype=torch.float64)
    expected = torch.logsumexp(all_scores, 0) - torch.logsumexp(gold_scores, 0)
    assert answerable.tolist() == [True]
    assert float(loss[0]) == pytest.approx(float(expected), rel=1e-5)

    best = best_span(joint_logits[0], spans)
    best_score = max(score for score, _ in pairs)
    assert best.log_prob == pytest.approx(best_score - float(torch.logsumexp(all_scores, 0)), abs=1e-5)
    start, end = best.start + len(question) + 2, best.end + len(question) + 2
    assert float(span_logits[best.candidate, spans.index(best.start, best.end)]) + float(
        retrieval_logits[0, best.candidate]
    ) == pytest.approx(best_score, abs=1e-5)
    assert spans.starts[best.candidate, spans.index(best.start, best.end)] == start
    assert spans.ends[best.candidate, spans.index(best.start, best.end)] == end


def test_a_span_scores_the_mlp_of_its_start_and_end_states_concatenated(tiny_config, tokenizer):
    """Brute force, span by span: score = w · LayerNorm(ReLU(W [h_start; h_end] + b)) + c."""
    reader = build_reader(tiny_config).eval()
    question = tokenizer.encode("who wrote it")
    bodies = [tokenizer.encode(t) for t in ("the nile is long", "ada")]
    joint, spans = reader_inputs(tokenizer, [(question, body) for body in bodies], untyped(bodies))
    with torch.no_grad():
        logits = reader.span_logits(joint, spans)
        hidden = reader.bert(**joint.as_kwargs()).last_hidden_state.float()
        first_layer = torch.cat(reader.span_projection.weight.chunk(2, dim=0), dim=1)  # [span_hidden, 2 * hidden]
        bias = sum(reader.span_projection.bias.chunk(2))
        for row in range(2):
            for span in spans.valid[row].nonzero().flatten().tolist():
                start, end = int(spans.starts[row, span]), int(spans.ends[row, span])
                pair = torch.cat([hidden[row, start], hidden[row, end]])
                units = first_layer @ pair + bias
                score = reader.span_output(reader.span_norm(torch.relu(units)))
                assert float(logits[row, span]) == pytest.approx(float(score), abs=1e-5)
    assert (logits[~spans.valid] == LOG_ZERO).all()


def test_a_question_with_no_gold_span_carries_no_loss_and_masked_blocks_no_probability(tiny_config, tokenizer):
    reader = build_reader(tiny_config).eval()
    question = tokenizer.encode("who wrote it")
    bodies = [tokenizer.encode("the nile is long"), []]
    joint, spans = reader_inputs(tokenizer, [(question, body) for body in bodies], untyped(bodies))
    span_logits = reader.span_logits(joint, spans)[None]  # [1, 2, spans]
    joint_logits = joint_span_logits(span_logits, torch.tensor([[0.0, 5.0]]), torch.tensor([[True, False]]))
    loss, answerable = joint_reader_loss(joint_logits, torch.zeros_like(joint_logits, dtype=torch.bool))
    assert answerable.tolist() == [False] and loss.tolist() == [0.0]
    assert loss.requires_grad
    assert torch.softmax(joint_logits, -1)[0, spans.valid.shape[1]:].sum() == 0  # the empty, masked slot


def test_spans_follow_a_body_cut_short_by_the_joint_length(tokenizer):
    question, body = list(range(1000, 1100)), list(range(2000, 2300))
    joint, spans = reader_inputs(tokenizer, [(question, body)], untyped([body]))
    kept = joint.input_ids.shape[1] - len(question) - 3
    ends = spans.ends[0][spans.valid[0]]
    assert kept < len(body) and ends.max() == joint.input_ids.shape[1] - 2  # last body wordpiece, before [SEP]
    gold = spans.gold_mask([[(len(body) - 2, len(body) - 1), (0, 1)]])  # the first was cut off
    assert gold.sum() == 1


def test_rows_read_at_their_own_padded_length_score_their_spans_as_the_padded_batch_does(tiny_config, tokenizer):
    """Blocks of very different lengths (and the null document) each read with the rows of
    the same `padded_length`, at that length whatever else is in the batch: every span's logit
    as when all are padded to the longest, LOG_ZERO where invalid."""
    reader = build_reader(tiny_config).eval()
    question = tokenizer.encode("who wrote the first algorithm")
    bodies = [tokenizer.encode("ada lovelace wrote it"), [], tokenizer.encode(" ".join(["the engine"] * 100))]
    joint, spans = reader_inputs(tokenizer, [(question, body) for body in bodies], untyped(bodies))
    widths = []
    reader.bert.register_forward_pre_hook(
        lambda module, args, kwargs: widths.append(kwargs["inputs_embeds"].shape[:2]), with_kwargs=True
    )
    with torch.no_grad():
        padded = reader.span_logits(joint, spans)
        widths.clear()
        grouped = span_logits_by_length(reader, joint, spans)
    assert grouped.shape == padded.shape
    assert torch.equal(grouped[~spans.valid], padded[~spans.valid])
    assert torch.allclose(grouped[spans.valid], padded[spans.valid], atol=1e-5)
    lengths = joint.attention_mask.sum(1).tolist()
    assert padded_length(lengths[0]) == padded_length(lengths[1]) < padded_length(lengths[2])
    assert widths == [torch.Size([2, padded_length(lengths[0])]), torch.Size([1, padded_length(lengths[2])])]


def test_the_block_words_the_question_says_are_flagged_at_their_joint_positions(tokenizer):
    question = tokenizer.encode("who wrote the analytical engine's algorithm")
    bodies = [tokenizer.encode("ada lovelace wrote the algorithm"), tokenizer.encode("the nile"), []]
    joint, _ = reader_inputs(tokenizer, [(question, body) for body in bodies], untyped(bodies))
    body_start = len(question) + 2
    flags = joint.question_match.tolist()
    # "wrote" and "algorithm" (all its wordpieces); "the" is a stop word; nothing outside a body.
    flagged = [joint.input_ids[0, i].item() for i, flag in enumerate(flags[0]) if flag]
    assert flagged == tokenizer.encode("wrote algorithm")
    assert all(flag == 0 for flag in flags[0][:body_start])
    assert flags[1] == [0] * len(flags[1]) and flags[2] == [0] * len(flags[2])


def test_a_fresh_reader_reads_as_without_flags_and_learns_the_match_vector(tiny_config, tokenizer):
    """The question-match vector starts at zero (a warm start reads as it did), is one of the
    fresh modules, gets a gradient from the reader's loss, and once non-zero changes only the
    rows that have a flagged wordpiece."""
    reader = build_reader(tiny_config).eval()
    question = tokenizer.encode("who wrote the first algorithm")
    bodies = [tokenizer.encode(t) for t in ("ada wrote it", "the nile")]
    joint, spans = reader_inputs(tokenizer, [(question, body) for body in bodies], untyped(bodies))
    unflagged = dataclasses.replace(joint, question_match=torch.zeros_like(joint.question_match))
    assert joint.question_match[0].any() and not joint.question_match[1].any()
    logits = reader.span_logits(joint, spans)
    assert torch.equal(logits, reader.span_logits(unflagged, spans).detach())
    assert reader.question_match in reader.fresh_modules()

    gold = spans.gold_mask([find_gold_spans(tokenizer, tokenizer.encode("ada wrote it"), ["Ada"]), []])
    joint_logits = joint_span_logits(logits[None], torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool))
    joint_reader_loss(joint_logits, gold.view(1, -1))[0].sum().backward()
    assert reader.question_match.weight.grad[1].abs().sum() > 0
    assert reader.question_match.weight.grad[0].abs().sum() == 0  # row 0, "no match", adds nothing

    with torch.no_grad():
        # A random direction: LayerNorm after the embeddings removes a constant vector's shift.
        reader.question_match.weight[1] = torch.randn(reader.config.hidden_size)
        changed = reader.span_logits(joint, spans)
    valid = spans.valid
    assert not torch.allclose(changed[0][valid[0]], logits[0][valid[0]])
    assert torch.allclose(changed[1][valid[1]], logits[1][valid[1]], atol=1e-6)


def test_entity_type_vectors_start_at_zero_train_and_change_only_the_tagged_rows(tiny_config, tokenizer):
    """Each body wordpiece's entity type id (from `entity_types`, as long as its body) is
    placed at its joint position; the type vectors start at zero (a checkpoint saved without
    them reads as it did), are fresh modules, get a gradient, and once non-zero change only
    the rows with a tagged wordpiece."""
    reader = build_reader(tiny_config).eval()
    question = tokenizer.encode("who wrote the first algorithm")
    bodies = [tokenizer.encode(t) for t in ("ada wrote it", "the nile")]
    person = ENTITY_TYPE_IDS["PERSON"]
    joint, spans = reader_inputs(tokenizer, [(question, body) for body in bodies], [[person, 0, 0], [0, 0]])
    body_start = len(question) + 2
    assert joint.entity_types[0].nonzero().flatten().tolist() == [body_start]
    assert joint.entity_types[0, body_start] == person and not joint.entity_types[1].any()
    untagged = dataclasses.replace(joint, entity_types=torch.zeros_like(joint.entity_types))
    logits = reader.span_logits(joint, spans)
    assert torch.equal(logits, reader.span_logits(untagged, spans).detach())
    assert reader.entity_type in reader.fresh_modules()

    gold = spans.gold_mask([find_gold_spans(tokenizer, bodies[0], ["Ada"]), []])
    joint_logits = joint_span_logits(logits[None], torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool))
    joint_reader_loss(joint_logits, gold.view(1, -1))[0].sum().backward()
    grad = reader.entity_type.weight.grad.abs().sum(dim=1)
    assert grad[person] > 0 and grad[0] == 0 and grad[ENTITY_TYPE_IDS["DATE"]] == 0

    with torch.no_grad():
        reader.entity_type.weight[person] = torch.randn(reader.config.hidden_size)
        changed = reader.span_logits(joint, spans)
    valid = spans.valid
    assert not torch.allclose(changed[0][valid[0]], logits[0][valid[0]])
    assert torch.allclose(changed[1][valid[1]], logits[1][valid[1]], atol=1e-6)


def test_inputs_without_entity_types_for_every_body_wordpiece_are_refused(tiny_config, tokenizer):
    """A reader that read blocks untagged would answer as if nothing in them were an entity:
    a missing or short list of types, or inputs built without them, fail loudly instead."""
    question, body = tokenizer.encode("who wrote it"), tokenizer.encode("ada wrote it")
    with pytest.raises(ValueError, match="1 entity-type lists for 2"):
        reader_inputs(tokenizer, [(question, body), (question, body)], untyped([body]))
    with pytest.raises(ValueError, match="pair 0: 2 entity types for a body of 3 wordpieces"):
        reader_inputs(tokenizer, [(question, body)], [[0, 0]])
    joint, spans = reader_inputs(tokenizer, [(question, body)], untyped([body]))
    with pytest.raises(ValueError, match="entity types"):
        build_reader(tiny_config).span_logits(dataclasses.replace(joint, entity_types=None), spans)


def _ada_and_the_nile(tokenizer, first_body="ada lovelace wrote it for the engine"):
    """A question read with two blocks, the first holding its answer: (bodies, joint, spans)."""
    question = tokenizer.encode("who wrote the first algorithm")
    bodies = [tokenizer.encode(t) for t in (first_body, "the nile")]
    joint, spans = reader_inputs(tokenizer, [(question, body) for body in bodies], untyped(bodies))
    return bodies, joint, spans


def _joint_loss_backward(tokenizer, logits, spans, answer_body) -> None:
    """Back-propagate the joint loss of `_ada_and_the_nile`'s question read with its two blocks."""
    gold = spans.gold_mask([find_gold_spans(tokenizer, answer_body, ["Ada Lovelace"]), []])
    joint_logits = joint_span_logits(logits[None], torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.bool))
    joint_reader_loss(joint_logits, gold.view(1, -1))[0].sum().backward()


def _plain_and_with(tiny_config, module: str):
    """A seeded reader and one built with the optional `module`, given the first's weights:
    (plain, extended, the keys only the extended one has, sorted)."""
    torch.manual_seed(0)
    plain = build_reader(dataclasses.replace(tiny_config, **{module: False})).eval()
    extended = build_reader(dataclasses.replace(tiny_config, **{module: True})).eval()
    assert getattr(plain, module) is None and getattr(extended.config, module)
    missing, unexpected = extended.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected
    return plain, extended, sorted(missing)


def test_span_features_start_at_zero_learn_from_the_joint_loss_and_then_move_the_spans(tiny_config, tokenizer):
    """A reader built with `span_features` reads as one without it (same weights otherwise)
    until its vectors move; they are fresh modules with a gradient from the joint loss, and
    once non-zero they move the valid spans' scores and leave invalid spans masked."""
    plain, featured, missing = _plain_and_with(tiny_config, "span_features")
    assert missing == [f"span_features.{name}.weight" for name in ("distance", "holds_question_word", "width")]
    assert all(weight.abs().sum() == 0 for weight in featured.span_features.parameters())
    bodies, joint, spans = _ada_and_the_nile(tokenizer, "ada lovelace wrote the first algorithm for the engine")
    logits = featured.span_logits(joint, spans)
    assert torch.equal(logits.detach(), plain.span_logits(joint, spans).detach())
    assert featured.span_features in featured.fresh_modules()

    _joint_loss_backward(tokenizer, logits, spans, bodies[0])
    assert all(weight.grad.abs().sum() > 0 for weight in featured.span_features.parameters())

    with torch.no_grad():
        for weight in featured.span_features.parameters():
            weight.normal_()
        changed = featured.span_logits(joint, spans)
    valid = spans.valid
    assert not torch.allclose(changed[valid], logits.detach()[valid])
    assert (changed[~valid] == LOG_ZERO).all()


def test_a_reader_with_span_features_refuses_spans_wider_than_its_width_table(tiny_config, tokenizer):
    featured = build_reader(dataclasses.replace(tiny_config, span_features=True, max_span_wordpieces=3)).eval()
    question, body = tokenizer.encode("who wrote it"), tokenizer.encode("ada lovelace wrote it")
    joint, spans = reader_inputs(tokenizer, [(question, body)], untyped([body]), max_span=4)
    with pytest.raises(ValueError, match="spans of up to 4 wordpieces, but the reader's span features know widths up to 3"):
        featured.span_logits(joint, spans)


@pytest.mark.parametrize("modules", [{"span_features": True}])
def test_optional_modules_draw_nothing_so_a_seeded_reader_and_what_follows_it_start_the_same(modules, tiny_config):
    """A seeded run with an optional module builds every other weight, and draws whatever it
    draws next, exactly as one without it; the module itself is all zeros."""
    def seeded(config):
        torch.manual_seed(7)
        return build_reader(config), torch.rand(4)

    plain, next_plain = seeded(dataclasses.replace(tiny_config, **dict.fromkeys(modules, False)))
    extended, next_extended = seeded(dataclasses.replace(tiny_config, **modules))
    assert torch.equal(next_extended, next_plain)
    weights = extended.state_dict()
    for key, value in plain.state_dict().items():
        assert torch.equal(weights.pop(key), value), key
    assert weights and all(key.split(".")[0] in modules for key in weights)
    assert all(not value.any() for value in weights.values())
