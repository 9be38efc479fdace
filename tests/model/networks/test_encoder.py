import dataclasses

import safetensors.torch
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


def _masked_pairs(tokenizer):
    """(query ids, [(masked query, body)]: a block that says the sentence's words, and the null document)."""
    query = tokenizer.encode("the seine flows through paris")
    masked = list(query)
    masked[1] = tokenizer.mask_id
    return query, [(masked, tokenizer.encode("the river seine flows through paris to the sea")), (masked, [])]


def test_an_encoder_saved_with_the_removed_modules_loads_without_them_and_reads_the_same(tiny_config, tokenizer, tmp_path):
    """Checkpoints written while the encoder held a question-match vector and a copy head
    (levers since removed) still load: their weights are left out, the rest is as saved."""
    encoder = build_encoder(tiny_config).eval()
    encoder.save_pretrained(tmp_path)
    weights = safetensors.torch.load_file(tmp_path / "model.safetensors")
    hidden = encoder.config.hidden_size
    weights["question_match.weight"] = torch.zeros(2, hidden)
    for name, rows in (("query", hidden), ("key", hidden), ("gate", 1)):
        weights[f"copy_head.{name}.weight"], weights[f"copy_head.{name}.bias"] = torch.ones(rows, hidden), torch.ones(rows)
    safetensors.torch.save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    loaded = build_encoder(dataclasses.replace(tiny_config, model_dir=str(tmp_path))).eval()
    torch.testing.assert_close(loaded.state_dict(), encoder.state_dict())
    query, pairs = _masked_pairs(tokenizer)
    joint = pad_batch([joint_sequence(tokenizer, q, z) for q, z in pairs], tokenizer.pad_id)
    positions, slot_mask, targets = torch.tensor([[2], [2]]), torch.tensor([[True], [True]]), torch.tensor([[query[1]]] * 2)
    with torch.no_grad():
        torch.testing.assert_close(
            loaded.masked_log_likelihood(joint, positions, targets, slot_mask),
            encoder.masked_log_likelihood(joint, positions, targets, slot_mask),
        )


def test_a_seeded_encoder_leaves_the_generator_where_the_encoder_with_the_removed_modules_did(tiny_config):
    """The next draws after a seeded random-init build, as realm drew them while the encoder
    still built a question-match vector and a copy head: later draws of a seeded run (dropout)
    are unchanged."""
    torch.manual_seed(0)
    build_encoder(tiny_config)
    assert torch.rand(2).tolist() == [0.26354390382766724, 0.12684398889541626]


def test_an_encoder_started_from_a_bert_for_masked_lm_starts_with_exactly_its_mlm_head(tmp_path, caplog):
    """`--bert DIR` of a BertForMaskedLM: the encoder's MLM head (transform, decoder bias) and its
    BERT body are the saved tensors, the decoder tied to the input embedding, and the log names
    the head as loaded; the towers and the reader take the same BERT body."""
    from transformers import BertForMaskedLM

    from realm.model.networks.config import ModelConfig
    from realm.model.networks.reader import build_reader
    from realm.model.networks.retriever import build_retriever
    from tests.bert_fixture import save_tiny_bert

    saved_dir = save_tiny_bert(tmp_path / "bert")
    saved = BertForMaskedLM.from_pretrained(saved_dir).state_dict()
    config = ModelConfig.preset("random-2l", bert_dir=str(saved_dir))
    with caplog.at_level("INFO", logger="realm.model.networks.config"):
        encoder = build_encoder(config)
    head = {name: tensor for name, tensor in encoder.state_dict().items() if name.startswith("cls.")}
    assert {"cls.predictions.transform.dense.weight", "cls.predictions.bias"} <= head.keys()
    for name, tensor in {**head, "bert.encoder.layer.1.output.dense.weight": None}.items():
        assert torch.equal(encoder.state_dict()[name], saved[name]), name
    assert encoder.cls.predictions.decoder.weight is encoder.bert.embeddings.word_embeddings.weight
    assert "KnowledgeAugmentedEncoder: from" in caplog.text and "cls.predictions; freshly initialised: nothing" in caplog.text
    body = saved["bert.embeddings.word_embeddings.weight"]
    retriever = build_retriever(config)
    for bert in (retriever.query_embedder.bert, retriever.doc_embedder.bert, build_reader(config).bert):
        assert torch.equal(bert.embeddings.word_embeddings.weight, body)
    assert config.tokenizer().vocab_size == len(body)
