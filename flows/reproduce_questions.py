"""The reproduction's question split: one training file and one evaluation file per dataset,
recorded with a digest so that a re-run on another split stops instead of mixing the two."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from realm.flows.reproduce_systems import ReproduceParams
from realm.model.training.stage_inputs import json_digest


def split_questions(params: ReproduceParams, directory: Path) -> tuple[str, list[str]]:
    """Write `train.jsonl` and one `<dataset>.eval.jsonl` per dataset; returns their paths.

    A dataset with an evaluation file in `qa_dev` is evaluated on it; one without gives up
    `dev_fraction` of its training questions, chosen by a hash of the question (stable across
    runs and machines), which are then left out of training."""
    from realm.model.qa.qa_data import hash_chosen, read_qa_file

    train = [e for path in params.qa_train for e in read_qa_file(path)]
    dev = [e for path in params.qa_dev for e in read_qa_file(path)]
    with_dev = {e.dataset for e in dev}
    evaluation = defaultdict(list, {d: [e for e in dev if e.dataset == d] for d in with_dev})
    kept = []
    for example in train:
        if example.dataset not in with_dev and hash_chosen(f"{params.seed}:{example.question}", params.dev_fraction):
            evaluation[example.dataset].append(example)
        else:
            kept.append(example)
    files = {"train.jsonl": kept} | {f"{d}.eval.jsonl": examples for d, examples in sorted(evaluation.items())}
    texts = {name: _questions_jsonl(examples) for name, examples in files.items()}
    digest = json_digest(texts)
    record = directory / "split.json"
    if record.exists() and json.loads(record.read_text())["sha256"] != digest:
        raise ValueError(
            f"{directory}: the question split differs from the one this reproduction trained on "
            "(other files, seed or dev_fraction); use a new output root"
        )
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (directory / name).write_text(text, encoding="utf-8")
    record.write_text(json.dumps({"sha256": digest, "files": sorted(texts)}, indent=2))
    return str(directory / "train.jsonl"), [str(directory / name) for name in texts if name != "train.jsonl"]


def _questions_jsonl(examples) -> str:
    rows = [
        {"question": e.question, "answers": list(e.answers), "dataset": e.dataset, "answer_type": e.answer_type}
        for e in examples
    ]
    return "".join(json.dumps(row) + "\n" for row in rows)
