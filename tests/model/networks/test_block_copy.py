import pytest
import torch

from realm.model.networks.encoder import build_encoder
from realm.model.networks.inputs import body_mask, joint_sequence, pad_batch


def _paris(tokenizer):
    """(masked query, body, joint inputs with that body and the null document, slots): the
    sentence's "paris" masked, and a body that says it twice."""
    query = tokenizer.encode("the capital of france is paris")
    masked = query[:5] + [tokenizer.mask_id]
    body = tokenizer.encode("paris is a city on the seine, and paris is big")
    joint = pad_batch([joint_sequence(tokenizer, masked, body), joint_sequence(tokenizer, masked, [])], tokenizer.pad_id)
    positions, slot_mask = torch.tensor([[6], [6]]), torch.tensor([[True], [True]])  # + 1: [CLS]
    return query[5], body, joint, positions, slot_mask


def test_body_mask_marks_each_row_s_body_and_nothing_of_the_null_document(tokenizer):
    _, body, joint, _, _ = _paris(tokenizer)
    mask = body_mask(joint)
    assert joint.input_ids[0][mask[0]].tolist() == body
    assert not mask[1].any()


def _set_copy_head(encoder, gate_bias: float) -> None:
    """A pointer that attends evenly over the body, and a gate that copies (bias < 0) or not."""
    head = encoder.copy_head
    for layer in (head.query, head.key, head.gate):
        torch.nn.init.zeros_(layer.weight)
        torch.nn.init.zeros_(layer.bias)
    head.gate.bias.fill_(gate_bias)


@pytest.mark.parametrize("gate_bias", [-60.0, 0.0, 60.0])
def test_copying_mixes_the_body_s_wordpiece_counts_into_the_vocabulary_distribution(tiny_config, tokenizer, gate_bias):
    encoder = build_encoder(tiny_config).eval()
    target, body, joint, positions, slot_mask = _paris(tokenizer)
    with torch.no_grad():
        _set_copy_head(encoder, gate_bias)
        vocab = encoder.masked_log_probs(joint, positions, slot_mask).exp()  # [2, vocab]
        mixed = encoder.masked_log_probs(joint, positions, slot_mask, copy_from_block=True).exp()
    copy = torch.zeros_like(vocab[0])
    for wordpiece in body:
        copy[wordpiece] += 1 / len(body)  # an even pointer: each wordpiece's share of the body
    keep = torch.sigmoid(torch.tensor(gate_bias))
    torch.testing.assert_close(mixed[0], keep * vocab[0] + (1 - keep) * copy, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(mixed.sum(dim=1), torch.ones(2))
    torch.testing.assert_close(mixed[1], vocab[1])  # the null document has nothing to copy
    if gate_bias < 0:
        assert mixed[0, target].item() == pytest.approx(2 / len(body), rel=1e-5)  # "paris" twice


def test_copying_gives_finite_gradients_to_the_pointer_the_gate_and_the_encoder(tiny_config, tokenizer):
    encoder = build_encoder(tiny_config)
    target, _, joint, positions, slot_mask = _paris(tokenizer)
    targets = torch.full_like(positions, target)
    encoder.masked_log_likelihood(joint, positions, targets, slot_mask, copy_from_block=True).sum().backward()
    head = encoder.copy_head
    for parameter in [head.query.weight, head.key.weight, head.gate.weight, encoder.bert.embeddings.word_embeddings.weight]:
        assert torch.isfinite(parameter.grad).all() and parameter.grad.abs().sum() > 0


def test_copying_under_bf16_autocast_gives_float32_log_probabilities(tiny_config, tokenizer):
    encoder = build_encoder(tiny_config).eval()
    _, _, joint, positions, slot_mask = _paris(tokenizer)
    with torch.no_grad():
        plain = encoder.masked_log_probs(joint, positions, slot_mask, copy_from_block=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            autocast = encoder.masked_log_probs(joint, positions, slot_mask, copy_from_block=True)
    assert autocast.dtype == torch.float32
    torch.testing.assert_close(autocast.exp(), plain.exp(), atol=0.02, rtol=0)
