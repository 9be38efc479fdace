"""A Hugging Face BERT directory a run starts from (`realm run --bert DIR`, `realm train --bert DIR`,
`realm prepare --bert DIR`): checked up front, and its weights identified by their sha256.

A `save_pretrained` directory of a `BertModel` or a `BertForMaskedLM` (e.g. bert-base-uncased,
the paper's start) holds `config.json` (model_type "bert"), its weights (`model.safetensors` or
`pytorch_model.bin`, either possibly sharded with its `.index.json`) and its WordPiece vocabulary
(`vocab.txt`, or `tokenizer.json`). Imports nothing heavy: the CLI checks a directory before a
Prefect server starts or a model loads.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
VOCABULARY_FILES = ("vocab.txt", "tokenizer.json")
HASH_CHUNK_BYTES = 1 << 20


class BertDirError(ValueError):
    """A --bert directory that is not a BERT a run can start from; the message is one line."""


def check_bert_dir(path: str | Path) -> str:
    """`path` resolved to an absolute path, or BertDirError naming everything it lacks."""
    directory = Path(path).expanduser().resolve()
    if not directory.is_dir():
        raise BertDirError(f"{path}: no such directory (a Hugging Face save_pretrained directory of a BERT)")
    missing = []
    if not (directory / "config.json").is_file():
        missing.append("config.json")
    if not weight_files(directory):
        missing.append(" or ".join(WEIGHT_FILES) + " (the weights)")
    if not any((directory / name).is_file() for name in VOCABULARY_FILES):
        missing.append(" or ".join(VOCABULARY_FILES) + " (the WordPiece vocabulary)")
    if missing:
        raise BertDirError(f"{path}: no {'; no '.join(missing)}")
    try:
        model_type = json.loads((directory / "config.json").read_text()).get("model_type")
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as error:
        raise BertDirError(f"{path}: config.json does not parse ({error})") from None
    if model_type != "bert":
        raise BertDirError(f"{path}: config.json's model_type is {model_type!r}, not 'bert'")
    return str(directory)


def weight_files(directory: str | Path) -> list[Path]:
    """The files holding a directory's weights, in the order transformers prefers them: one file,
    or the shards its index lists (sorted); empty where it holds none."""
    directory = Path(directory)
    for name in WEIGHT_FILES:
        if (directory / name).is_file():
            return [directory / name]
        index = directory / f"{name}.index.json"
        if index.is_file():
            try:
                shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
                return []
            if shards and all((directory / shard).is_file() for shard in shards):
                return [directory / shard for shard in shards]
    return []


def weights_sha256(directory: str | Path) -> str | None:
    """sha256 of the directory's weight files' bytes, read in order (one file: that file's
    sha256, as `sha256sum` prints it); None where it holds none. Streamed: nothing is loaded."""
    files = weight_files(directory)
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        with path.open("rb") as handle:
            while chunk := handle.read(HASH_CHUNK_BYTES):
                digest.update(chunk)
    return digest.hexdigest()
