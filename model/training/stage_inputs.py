"""What a training stage is trained on, recorded in the manifest of each of its checkpoints,
so that a stage resumes only on the same inputs: the content of the data it reads and of the
checkpoint or index it starts from, every setting but those that leave the steps unchanged,
and the seed. `realm.model.training.trainer` starts a new stage when any of them changed.

Content, not paths: a file is its sha256; a prepared artifact whose manifest records its rows
the digest of those rows (`realm.schemas.rows_digest`: the same rows in other shards, as a
preparation run again writes them, are the same input); a published step directory (a
checkpoint, an index) or an artifact prepared before rows were recorded the file list of its
manifest (sizes and sha256s, written last); any other directory the sha256s of its files. So
a run folder copied elsewhere resumes, and a question file edited in place does not.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel

from realm.model.publish import MANIFEST_FILE, file_sha256, read_manifest
from realm.schemas.rows_digest import ROWS_KEY, rows_digest

# Settings that leave every step as it was: how long a stage runs (a resumed stage may go on
# for longer), how often it reports, checkpoints and evaluates, how many checkpoints it keeps,
# and how many sequences share a forward (the same up to float rounding; a run started on a CPU
# may resume on a GPU).
NOT_INPUTS = frozenset(
    {"steps", "epochs", "log_every", "checkpoint_every", "keep_checkpoints", "eval_every", "untrained_eval_examples",
     "micro_batch"}
)

# Settings since removed (measured and not kept), at the value every stage trained with unless
# asked otherwise: a checkpoint that records one at that value resumes as if it recorded none.
REMOVED_SETTINGS = {
    "copy_from_block": False, "mark_sentence_words": False, "holder_retrieval_weight": 0.0,
    "reachable_spans_only": False, "copy_span_max_blocks": None, "answer_pointer": False, "block_relevance": False,
    "answer_type": False, "encoder_share": 1.0, "bm25_candidates": 0, "retrieve_every_step": False,
}

# Settings since renamed: a checkpoint that records the old name resumes under the new one,
# its value mapped where the new setting takes other values.
RENAMED_SETTINGS = {"tower_pooling": "retrieval_pooling", "cached_doc_embeddings": "doc_tower"}
RENAMED_VALUES = {"cached_doc_embeddings": {True: "frozen", False: "whole"}}


def content_digest(path: str | os.PathLike) -> str:
    """sha256 of what `path` holds (module docstring); FileNotFoundError naming it if it is gone."""
    path = Path(path)
    if path.is_file():
        return file_sha256(path)
    if (path / MANIFEST_FILE).is_file():
        manifest = read_manifest(path)
        if ROWS_KEY in manifest:
            return rows_digest(manifest[ROWS_KEY])
        return json_digest(manifest.get("files", manifest.get("sha256")))  # indexes published before sizes: digests alone
    if path.is_dir():
        return json_digest({p.relative_to(path).as_posix(): file_sha256(p) for p in sorted(path.rglob("*")) if p.is_file()})
    raise FileNotFoundError(f"{path}: not found (a stage's input)")


def json_digest(value) -> str:
    """sha256 of `value` as sorted JSON."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def stage_inputs(
    settings: BaseModel, seed: int, data: Mapping[str, str | os.PathLike | None], values: Mapping[str, str | None] = {}
) -> dict:
    """A stage's inputs record, plain JSON: {"data": the `content_digest` of each of `data`
    (None stays None) and `values` as they are (data held in memory, digested by the caller),
    "settings": each setting but NOT_INPUTS, "seed"}."""
    digests = {name: None if path is None else content_digest(path) for name, path in data.items()}
    return {
        "data": digests | dict(values),
        "settings": {name: value for name, value in settings.model_dump(mode="json").items() if name not in NOT_INPUTS},
        "seed": seed,
    }


def changed_inputs(recorded: Mapping, current: Mapping, settings: type[BaseModel] | None = None) -> list[str]:
    """What differs between two inputs records, one phrase each: a data name ("questions"),
    a setting with its old and new value ("learning_rate 0.001 -> 0.0005"), the seed. With the
    `settings` model, a setting the recorded inputs lack counts as its default: one added to
    realm since, left at its default, changes nothing a stage trained; a removed one recorded
    at its `REMOVED_SETTINGS` value is no change either, and a renamed one counts under its new name."""
    old_data, new_data = recorded.get("data", {}), current.get("data", {})
    changes = [name for name in sorted(old_data.keys() | new_data.keys()) if old_data.get(name) != new_data.get(name)]
    old_settings, new_settings = dict(recorded.get("settings", {})), current.get("settings", {})
    for old, new in RENAMED_SETTINGS.items():
        if old in old_settings and new not in old_settings:
            value = old_settings.pop(old)
            old_settings[new] = RENAMED_VALUES.get(old, {}).get(value, value)
    for name, value in REMOVED_SETTINGS.items():
        if name in old_settings and name not in new_settings and old_settings[name] == value:
            del old_settings[name]
    for name in new_settings.keys() - old_settings.keys() if settings is not None else ():
        field = settings.model_fields.get(name)
        if field is not None and not field.is_required():
            old_settings[name] = field.get_default(call_default_factory=True)
    changes += [
        f"{name} {old_settings.get(name)} -> {new_settings.get(name)}"
        for name in sorted(old_settings.keys() | new_settings.keys())
        if old_settings.get(name) != new_settings.get(name)
    ]
    if recorded.get("seed") != current.get("seed"):
        changes.append(f"seed {recorded.get('seed')} -> {current.get('seed')}")
    return changes
