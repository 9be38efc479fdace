"""`realm info --run DIR`: what a run folder holds, read from its artifacts alone: the prepared
corpus's counts, each stage's checkpoints (the best validated one and its exact match), the
checkpoint and index that answer questions, and every index's lineage (the doc tower and corpus
snapshot it was built from). Nothing is loaded but JSON manifests and checkpoint states, and
the checkpoint that answers is verified in full (hashed) as answering verifies it; any other
step whose files are missing or cut short (sizes against its manifest), a summary or manifest
that does not parse, is reported as damaged, naming the file, beside the rest.
"""

from __future__ import annotations

import json
from pathlib import Path

from realm.model.networks.checkpoint import BEST_DIR, TRAINING_STATE_FILE, checkpoint_extra
from realm.model.publish import MANIFEST_FILE, published_steps, read_manifest, step_damage
from realm.model.qa.trained_run import TrainedRun
from realm.schemas.manifest import IntegrityError
from realm.schemas.run_layout import RunLayout

STAGES = ("ict", "pretrain", "warmup", "finetune")


def run_info(root: str | Path) -> dict:
    layout = RunLayout.at(root)
    if not layout.root.is_dir():
        raise FileNotFoundError(f"{root}: no such run folder")
    info = {
        "run": str(layout.root),
        "model_preset": layout.model_preset(),
        "bert": _bert(layout.bert_dir()),
        "vocabulary": layout.prepared_vocabulary(),
        "prepare": _prepare_summary(layout.root / "summary" / "prepare.json"),
        "stages": {stage: _stage(Path(layout.checkpoints(stage))) for stage in STAGES},
        "indexes": {},
    }
    roots = {"index": layout.index, "bm25": layout.bm25}
    roots |= {f"corpora/{name}/index": layout.corpus(name).index for name in layout.corpora()}
    for label, index_root in roots.items():
        for step, path in published_steps(index_root):
            if (path / MANIFEST_FILE).is_file():
                info["indexes"][f"{label}/{step}"] = _index(path)
    try:
        trained = TrainedRun.at(layout.root)
        info["answers_with"] = {"checkpoint": _relative(trained.checkpoint, layout), "index": _relative(trained.index, layout)}
    except FileNotFoundError as error:
        info["answers_with"] = {"missing": str(error)}
    else:
        # An index in another run (a reproduction's systems answer from base/index/): its lineage too.
        if not trained.index.is_relative_to(layout.root) and (trained.index / MANIFEST_FILE).is_file():
            info["indexes"][str(trained.index)] = _index(trained.index)
    return info


def _bert(bert_dir: str | None) -> dict | None:
    """The BERT directory the run starts from (`--bert`) and its weights' sha256, hashed now
    (streamed; a run records the path, so a directory changed since shows another digest)."""
    from realm.model.networks.bert_dir import weights_sha256

    if bert_dir is None:
        return None
    if not Path(bert_dir).is_dir():
        return {"dir": bert_dir, "missing": f"{bert_dir}: no such directory"}
    return {"dir": bert_dir, "weights_sha256": weights_sha256(bert_dir)}


def _prepare_summary(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return {"damaged": f"{path}: does not parse ({error})"}


def _stage(checkpoint_root: Path) -> dict | None:
    steps, damaged = _checkpoints(checkpoint_root)
    if not steps and not damaged:
        return None
    best, best_damaged = _checkpoints(checkpoint_root / BEST_DIR)
    stage = {"steps": [step for step, _ in steps]}
    if best:
        # The best checkpoint is saved before its own validation is recorded; the regular
        # checkpoint saved right after it (and every later one) holds the record.
        try:
            recorded = (checkpoint_extra(steps[-1][1]).get("best") or {}) if steps else {}
        except Exception as error:  # whatever torch.load raises on a state altered in place (zip, unpickling, EOF)
            damaged[str(steps[-1][0])] = f"{steps[-1][1] / TRAINING_STATE_FILE}: does not load ({error})"
            recorded = {}
        em = recorded.get("exact_match") if recorded.get("step") == best[-1][0] else None
        stage["best"] = {"step": best[-1][0], "validation_exact_match": em}
    damaged |= {f"best/{step}": why for step, why in best_damaged.items()}
    if damaged:
        stage["damaged"] = damaged
    return stage


def _checkpoints(root: Path) -> tuple[list[tuple[int, Path]], dict[str, str]]:
    """The steps under `root` whose files are there at the sizes their manifests record (or,
    written before manifests, that hold their training state), and the others with why not."""
    intact, damaged = [], {}
    for step, path in published_steps(root):
        problem = step_damage(path, TRAINING_STATE_FILE, contents=False)
        if problem is None:
            intact.append((step, path))
        else:
            damaged[str(step)] = str(problem)
    return intact, damaged


def _index(path: Path) -> dict:
    try:
        manifest = read_manifest(path)
    except IntegrityError as problem:  # a manifest that does not parse
        return {"damaged": str(problem)}
    return {"type": manifest.get("index_type"), "blocks": manifest.get("count"), "lineage": manifest.get("lineage")}


def _relative(path: Path, layout: RunLayout) -> str:
    return str(path.relative_to(layout.root)) if path.is_relative_to(layout.root) else str(path)


def format_info(info: dict) -> str:
    lines = [f"run {info['run']} (model preset {info['model_preset'] or 'not recorded'})"]
    bert = info["bert"]
    if bert is None:
        lines.append("bert: the model preset's own")
    else:
        lines.append(f"bert: {bert['dir']} (" + (bert.get("missing") or f"weights sha256 {bert['weights_sha256']}") + ")")
    if info["vocabulary"]:
        lines.append(f"vocabulary: blocks cut with {info['vocabulary'].get('source')} (sha256 {info['vocabulary']['sha256'][:12]})")
    prepare = info["prepare"]
    if prepare is None:
        lines.append("prepare: no summary/prepare.json")
    elif "damaged" in prepare:
        lines.append(f"prepare: {prepare['damaged']}")
    else:
        # Beam records a counter only once incremented: a stage that kept nothing has none.
        def count(stage: str, counter: str) -> str:
            return f"{prepare.get(stage, {}).get(counter, 0):,}"

        lines.append(
            f"prepare: {count('chunk', 'blocks')} blocks from {count('chunk', 'documents')} documents, "
            f"{count('trivial', 'examples')} pre-training examples, {count('ict', 'examples')} ICT examples"
        )
    lines.append("checkpoints:")
    for stage, found in info["stages"].items():
        if found is None:
            lines.append(f"  {stage:<9} none")
            continue
        best = found.get("best")
        em = best and best["validation_exact_match"]
        best_text = f"; best {best['step']}" + (f" (validation EM {em:.3f})" if em is not None else "") if best else ""
        lines.append(f"  {stage:<9} steps {', '.join(map(str, found['steps'])) or 'none intact'}{best_text}")
        lines += [f"  {'':<9} damaged {step}: {why}" for step, why in found.get("damaged", {}).items()]
    answers = info["answers_with"]
    lines.append("answers with: " + (answers.get("missing") or f"{answers['checkpoint']} over {answers['index']}"))
    lines.append("indexes:")
    for name, index in info["indexes"].items():
        lineage = index.get("lineage")
        if "damaged" in index:
            lines.append(f"  {name:<24} damaged: {index['damaged']}")
            continue
        if index["type"] == "bm25":
            built = "BM25 over the run's blocks (no doc tower)"
        elif lineage is None:
            built = "built before lineage was recorded"
        else:
            tower, corpus = lineage["doc_tower"], lineage["corpus"]
            built = (f"doc tower step {tower['step']} (sha256 {tower['sha256'][:12]}), corpus {corpus['blocks']:,} "
                     f"blocks (sha256 {corpus['content_sha256'][:12]}), {lineage['max_block_wordpieces']} wordpieces a "
                     f"block, built {lineage['built_at']}")
            if "embedded" in lineage:
                built += f"; {lineage['embedded']} embedded, {lineage['reused']} reused, {lineage['dropped']} dropped"
        lines.append(f"  {name:<24} {index['type']}, {index['blocks']:,} blocks: {built}")
    if not info["indexes"]:
        lines.append("  none")
    return "\n".join(lines)
