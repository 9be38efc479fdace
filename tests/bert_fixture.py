"""A small random BertForMaskedLM saved as a user's `--bert DIR` would be: `save_pretrained`
weights and config, and a vocab.txt of its own (letters and their continuations, so any lowercase
text has wordpieces, and a few whole words), far smaller than the default vocabulary."""

from __future__ import annotations

import string
from pathlib import Path

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["the", "of", "is", "in", "paris", "france", "river", "city", "capital", "."]
VOCABULARY = SPECIALS + list(string.ascii_lowercase) + [f"##{c}" for c in string.ascii_lowercase] + WORDS + list(string.digits)


def save_tiny_bert(directory: str | Path, seed: int = 7) -> Path:
    """A 2-layer, 32-wide BertForMaskedLM with random weights (its MLM head's too, so a head
    loaded differs from a fresh one), saved under `directory` with its vocab.txt."""
    import torch
    from transformers import BertConfig, BertForMaskedLM

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "vocab.txt").write_text("\n".join(VOCABULARY) + "\n")
    torch.manual_seed(seed)
    model = BertForMaskedLM(BertConfig(
        vocab_size=len(VOCABULARY), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=512,
    ))
    with torch.no_grad():
        for parameter in model.cls.parameters():
            parameter.normal_()
    model.save_pretrained(directory)
    return directory
