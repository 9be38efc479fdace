import torch

from realm.model.networks.encoder import build_encoder
from realm.model.networks.inputs import joint_sequence, pad_batch


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
