import dataclasses
import math

import pytest
import torch

from realm.model.networks.encoder import build_encoder
from realm.model.networks.reader import answer_slots, build_reader, reader_inputs


def _inputs(tokenizer, answer_slot: bool):
    question = tokenizer.encode("who wrote the first algorithm")
    bodies = [tokenizer.encode(t) for t in ("ada lovelace wrote the first algorithm", "the nile is long")]
    joint, spans = reader_inputs(
        tokenizer, [(question, body) for body in bodies], [[0] * len(b) for b in bodies], answer_slot=answer_slot
    )
    return question, bodies, joint, spans


def _pointing_reader(tiny_config):
    """A reader whose pointer maps are far from BERT's near-zero init, so its scores count."""
    reader = build_reader(dataclasses.replace(tiny_config, answer_pointer=True)).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in reader.answer_pointer.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
    return reader


def test_the_answer_slot_ends_the_question_and_moves_the_body_one_position_on(tokenizer):
    question, bodies, plain, plain_spans = _inputs(tokenizer, answer_slot=False)
    _, _, joint, spans = _inputs(tokenizer, answer_slot=True)
    slots = answer_slots(joint)
    assert slots.tolist() == [len(question) + 1] * 2  # [CLS] q [MASK]
    assert joint.input_ids[0, : len(question) + 3].tolist() == [
        tokenizer.cls_id, *question, tokenizer.mask_id, tokenizer.sep_id
    ]
    assert spans.starts[:, 0].tolist() == [len(question) + 3] * 2
    assert torch.equal(spans.starts - 1, plain_spans.starts) and torch.equal(spans.valid, plain_spans.valid)
    # The question's words flagged in the body are the same, one position on.
    assert torch.equal(joint.question_match[:, 1:], plain.question_match[:, : joint.input_ids.shape[1] - 1])
    assert joint.question_match[0].sum() == plain.question_match[0].sum() > 0


def test_a_span_scores_the_mlp_plus_the_slots_start_pointer_at_its_start_and_end_pointer_at_its_end(
    tiny_config, tokenizer
):
    """Brute force, span by span."""
    reader = _pointing_reader(tiny_config)
    assert reader.reads_answer_slot
    _, _, joint, spans = _inputs(tokenizer, answer_slot=True)
    pointer = reader.answer_pointer
    with torch.no_grad():
        logits = reader.span_logits(joint, spans)
        hidden = reader.bert(**joint.as_kwargs()).last_hidden_state.float()  # the feature vectors start at zero
        first_layer = torch.cat(reader.span_projection.weight.chunk(2, dim=0), dim=1)
        bias = sum(reader.span_projection.bias.chunk(2))
        d = math.sqrt(hidden.shape[-1])
        for row, slot in enumerate(answer_slots(joint).tolist()):
            start_query, end_query = pointer.start_query(hidden[row, slot]), pointer.end_query(hidden[row, slot])
            for span in spans.valid[row].nonzero().flatten().tolist():
                start, end = int(spans.starts[row, span]), int(spans.ends[row, span])
                units = first_layer @ torch.cat([hidden[row, start], hidden[row, end]]) + bias
                mlp = reader.span_output(reader.span_norm(torch.relu(units)))
                pointed = start_query @ pointer.start_key(hidden[row, start]) / d + end_query @ pointer.end_key(hidden[row, end]) / d
                assert abs(float(pointed)) > 1e-3  # the pointer's part is not negligible here
                assert float(logits[row, span]) == pytest.approx(float(mlp + pointed), abs=1e-4)


def test_both_pointers_start_as_the_copy_head_scores_the_slot_against_each_wordpiece(tiny_config, tokenizer):
    encoder = build_encoder(tiny_config)
    reader = build_reader(dataclasses.replace(tiny_config, answer_pointer=True)).eval()
    with torch.no_grad():
        for parameter in encoder.copy_head.parameters():
            parameter.normal_(std=0.3)
    reader.answer_pointer.start_from(encoder.copy_head)
    _, _, joint, _ = _inputs(tokenizer, answer_slot=True)
    with torch.no_grad():
        hidden = reader.bert(**joint.as_kwargs()).last_hidden_state
        slots = answer_slots(joint)
        start, end = reader.answer_pointer(hidden, slots)
        head = encoder.copy_head
        queries = head.query(hidden[torch.arange(2), slots])  # [2, hidden]
        copy_scores = torch.einsum("nh,nlh->nl", queries, head.key(hidden)) / math.sqrt(hidden.shape[-1])
    torch.testing.assert_close(start, copy_scores)
    torch.testing.assert_close(end, copy_scores)


def test_a_reader_without_the_pointer_reads_no_slot_and_trains_no_pointer(tiny_config):
    reader = build_reader(tiny_config)
    assert reader.answer_pointer is None and not reader.reads_answer_slot
    pointing = build_reader(dataclasses.replace(tiny_config, answer_pointer=True))
    assert pointing.answer_pointer in pointing.fresh_modules()
