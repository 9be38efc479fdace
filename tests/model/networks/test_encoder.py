import dataclasses

import safetensors.torch
import torch

from realm.model.networks.encoder import build_encoder
from realm.model.networks.inputs import joint_sequence, pad_batch
from realm.model.networks.question_match import question_match_flags


def test_masked_log_likelihood_equals_manual_sum_over_full_logits(tiny_config, tokenizer):
    encoder = build_encoder(tiny_config).eval()
    query = tokenizer.encode("the capital of france is paris")
    masked = list(query)
    masked[4:6] = [tokenizer.mask_id] * 2
    sequences = [
        joint_sequence(tokenizer, masked, tokenizer.encode("paris is a city on the seine")),
        joint_sequence(tokenizer, masked, []),  # the null document
    ]
    joint = pad_batch(sequences, tokenizer.pad_id)
    positions = torch.tensor([[5, 6, 0], [5, 6, 0]])  # + 1 for [CLS]; third slot is padding
    targets = torch.tensor([[query[4], query[5], 7], [query[4], query[5], 7]])
    slot_mask = torch.tensor([[True, True, False], [True, True, False]])

    with torch.no_grad():
        got = encoder.masked_log_likelihood(joint, positions, targets, slot_mask)
        full = torch.log_softmax(encoder(**joint.as_kwargs()).logits, dim=-1)  # [2, length, vocab]
    for row in range(2):
        manual = full[row, 5, query[4]] + full[row, 6, query[5]]
        torch.testing.assert_close(got[row], manual, rtol=1e-5, atol=1e-5)


def test_output_embedding_is_tied_to_input_embedding(tiny_config):
    encoder = build_encoder(tiny_config)
    assert encoder.cls.predictions.decoder.weight is encoder.bert.embeddings.word_embeddings.weight


def _masked_pairs(tokenizer):
    """(query ids, [(masked query, body)]: a block that says the sentence's words, and the null document)."""
    query = tokenizer.encode("the seine flows through paris")
    masked = list(query)
    masked[1] = tokenizer.mask_id
    return query, [(masked, tokenizer.encode("the river seine flows through paris to the sea")), (masked, [])]


def test_flagged_words_get_the_question_match_vector_and_nothing_else_changes(tiny_config, tokenizer):
    encoder = build_encoder(tiny_config).eval()
    query, pairs = _masked_pairs(tokenizer)
    joint = pad_batch([joint_sequence(tokenizer, q, z) for q, z in pairs], tokenizer.pad_id)
    positions, slot_mask = torch.tensor([[2], [2]]), torch.tensor([[True], [True]])
    targets = torch.tensor([[query[1]], [query[1]]])
    with torch.no_grad():
        plain = encoder.masked_log_likelihood(joint, positions, targets, slot_mask)
        joint.question_match = question_match_flags(tokenizer, joint, pairs)
        flagged = joint.input_ids[0][joint.question_match[0].bool()].tolist()
        assert tokenizer.convert_ids_to_tokens(flagged) == ["flows", "through", "paris"]
        assert not joint.question_match[1].any()
        # Zero, as it starts and as a checkpoint without it loads: the flags change nothing.
        torch.testing.assert_close(encoder.masked_log_likelihood(joint, positions, targets, slot_mask), plain)
        # Not a constant: the embeddings' LayerNorm takes any constant shift away.
        encoder.question_match.weight[1] = torch.linspace(-1, 1, encoder.config.hidden_size)
        marked = encoder.masked_log_likelihood(joint, positions, targets, slot_mask)
    assert not torch.allclose(marked[0], plain[0])
    torch.testing.assert_close(marked[1], plain[1])  # the null document has no words to flag


def test_an_encoder_saved_before_the_question_match_vector_loads_it_as_zero(tiny_config, tmp_path):
    encoder = build_encoder(tiny_config)
    encoder.save_pretrained(tmp_path)
    weights = safetensors.torch.load_file(tmp_path / "model.safetensors")
    del weights["question_match.weight"]
    safetensors.torch.save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    loaded = build_encoder(dataclasses.replace(tiny_config, model_dir=str(tmp_path)))
    assert not loaded.question_match.weight.any()
    torch.testing.assert_close(loaded.bert.state_dict(), encoder.bert.state_dict())
