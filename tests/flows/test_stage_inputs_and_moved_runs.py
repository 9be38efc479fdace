"""A stage keys on its inputs' content, and a run folder is self-contained (issue 14, items 2 and 3)."""

import json
import logging
import shutil
from pathlib import Path

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

from realm.flows.demo import DATA_DIR, demo_qa_path
from realm.flows.evaluate import evaluate
from realm.flows.finetune_openqa import finetune_openqa
from realm.flows.ict_warm_start import ict_warm_start
from realm.flows.params import EvaluateParams
from realm.flows.prepare import realm_prepare
from realm.flows.realm_pretrain import realm_pretrain
from realm.model.networks.checkpoint import checkpoint_inputs
from realm.model.publish import read_manifest
from realm.model.qa.trained_run import TrainedRun
from realm.schemas import BLOCKS, read_table
from tests.flows.tiny_run import tiny_params
from tests.pipelines.run_files import file_bytes


def test_a_question_file_edited_in_place_starts_a_new_fine_tuning_stage(run_root, tmp_path):
    """Same path, one question more: not the cached result of the old file, but a new stage,
    the old one kept beside it."""
    params = tiny_params(run_root)
    questions = tmp_path / "qa.jsonl"
    shutil.copy(DATA_DIR / "qa" / "ct.train.jsonl", questions)
    finetune = params.finetune.model_copy(update={"retriever": "bm25", "qa_train": [str(questions)]})
    first = finetune_openqa(params.run, finetune)
    with questions.open("a") as handle:
        handle.write(json.dumps({"question": "what is the airspeed of an unladen swallow?", "answers": ["24 mph"]}) + "\n")
    second = finetune_openqa(params.run, finetune)

    superseded = run_root / "checkpoints" / "finetune.superseded-1"
    assert Path(first["checkpoint"].replace(str(run_root / "checkpoints" / "finetune"), str(superseded))).is_dir()
    assert Path(second["checkpoint"]).parent.parent == run_root / "checkpoints" / "finetune"
    first_inputs = checkpoint_inputs(next(p for p in superseded.iterdir() if p.name.isdigit()))
    assert first_inputs["data"]["questions"] != checkpoint_inputs(second["checkpoint"])["data"]["questions"]


def test_a_corpus_prepared_again_with_the_same_rows_leaves_the_stage_after_it_done(run_root, caplog):
    """The same articles prepared again, by the flow and the main job's two worker processes
    (Beam splits the rows among other shards than the in-process runner did): the artifacts
    holding the same rows are left as they were, and fine-tuning is not trained again."""
    params = tiny_params(run_root)
    finetune = params.finetune.model_copy(update={"retriever": "bm25"})
    first = finetune_openqa(params.run, finetune)
    blocks = file_bytes(run_root / "blocks")

    counts = realm_prepare(params.run, params.prepare)  # no cached result in this run: prepared again

    assert counts["chunk"]["blocks"] == read_table(str(run_root / "blocks"), BLOCKS).num_rows
    assert file_bytes(run_root / "blocks") == blocks
    with caplog.at_level(logging.INFO):
        assert finetune_openqa(params.run, finetune) == first
    assert any(m.startswith("realm-train-finetune: done before with these inputs") for m in caplog.messages)


def test_evaluation_answers_again_only_when_its_questions_checkpoint_or_index_change(run_root, tmp_path):
    params = tiny_params(run_root)
    finetune_openqa(params.run, params.finetune.model_copy(update={"retriever": "bm25"}))
    questions = tmp_path / "qa.jsonl"
    shutil.copy(demo_qa_path(), questions)
    first = evaluate(params.run, EvaluateParams(qa=[str(questions)]))
    predictions = run_root / "predictions" / "demo.parquet"
    written = predictions.stat().st_mtime_ns
    cached = evaluate(params.run, EvaluateParams(qa=[str(questions)]), return_state=True)
    assert cached.result() == first
    assert predictions.stat().st_mtime_ns == written  # the cached result: nothing answered again
    # ...and still published to its own flow run, for the Prefect UI.
    with get_client(sync_client=True) as client:
        published = {artifact.key: artifact.data for artifact in client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[cached.state_details.flow_run_id])))}
    assert set(published) == {"realm-eval-metrics", "realm-eval-em"}
    first_question = json.loads(questions.read_text().splitlines()[0])["question"]
    assert f"| demo | {first['demo']['n']} | {first['demo']['em']:.3f} |" in published["realm-eval-em"]
    assert f"| demo | {first_question} |" in published["realm-eval-em"]
    predictions.unlink()  # an output gone, its manifest left: answered again, not a hit without predictions
    assert evaluate(params.run, EvaluateParams(qa=[str(questions)])) == first and predictions.is_file()
    with questions.open("a") as handle:
        handle.write(json.dumps({"question": "Where is the Eiffel Tower?", "answers": ["Paris"], "dataset": "demo"}) + "\n")
    assert evaluate(params.run, EvaluateParams(qa=[str(questions)]))["demo"]["n"] == first["demo"]["n"] + 1


def test_a_run_folder_moved_elsewhere_hits_its_cache_answers_and_resumes_inside_the_copy(run_root, tmp_path):
    params = tiny_params(run_root)
    ict_warm_start(params.run, params.ict)
    realm_pretrain(params.run, params.pretrain)
    finetune_openqa(params.run, params.finetune)

    moved = tmp_path / "moved"
    shutil.copytree(run_root, moved, symlinks=True)
    shutil.rmtree(run_root)
    params = tiny_params(moved)
    cached = sorted((moved / ".realm-cache").iterdir())

    # Cache hits (no new entry), with paths in the copy.
    assert ict_warm_start(params.run, params.ict)["checkpoint"] == str(moved / "checkpoints" / "ict" / "6")
    finetuned = finetune_openqa(params.run, params.finetune)
    assert finetuned["checkpoint"].startswith(str(moved)) and finetuned["index"] == str(moved / "index" / "6")
    assert sorted((moved / ".realm-cache").iterdir()) == cached
    trained = TrainedRun.at(moved)
    assert (trained.checkpoint.parent.parent, trained.index) == (moved / "checkpoints" / "finetune", moved / "index" / "6")
    metrics = evaluate(params.run, EvaluateParams(qa=[str(demo_qa_path())]))
    assert metrics["demo"]["n"] == 40 and (moved / "predictions" / "demo.parquet").is_file()

    # Two more pre-training steps resume from the copy's checkpoint, and what the new one uses
    # (its index, the ICT checkpoint it started from) is inside the copy.
    longer = realm_pretrain(params.run, params.pretrain.model_copy(update={"steps": 8}))
    assert longer["step"] == 8 and longer["checkpoint"] == str(moved / "checkpoints" / "pretrain" / "8")
    uses = {(Path(longer["checkpoint"]) / used).resolve() for used in read_manifest(longer["checkpoint"])["uses"]}
    assert moved / "checkpoints" / "ict" / "6" in uses and all(path.is_relative_to(moved) for path in uses)
