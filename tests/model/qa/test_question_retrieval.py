import torch

from realm.model.networks.inputs import PAD_MULTIPLE, padded_length
from realm.model.networks.retriever import build_retriever
from realm.model.qa.question_retrieval import embed_questions


def test_each_question_is_embedded_at_its_own_padded_length_in_input_order(tiny_config, tokenizer):
    """A short question beside a long one is read at its own padded length, not the long one's,
    so what it retrieves does not depend on the questions asked with it."""
    embedder = build_retriever(tiny_config).query_embedder.eval()
    questions = [tokenizer.encode(" ".join(["river"] * PAD_MULTIPLE)), tokenizer.encode("nile"), tokenizer.encode("rivers")]
    widths = []
    embedder.register_forward_pre_hook(lambda module, args, kwargs: widths.append(kwargs["input_ids"].shape), with_kwargs=True)
    cpu = torch.device("cpu")
    with torch.no_grad():
        together = embed_questions(embedder, tokenizer, questions, cpu, cpu_bf16_autocast=False)
        alone = torch.cat([embed_questions(embedder, tokenizer, [q], cpu, cpu_bf16_autocast=False) for q in questions])
    torch.testing.assert_close(together, alone)
    short, long = padded_length(len(questions[1]) + 2), padded_length(len(questions[0]) + 2)
    assert short < long
    assert widths[:2] == [torch.Size([2, short]), torch.Size([1, long])]
