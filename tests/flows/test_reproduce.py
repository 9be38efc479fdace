import json

import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from realm.flows.reproduce import realm_reproduce
from realm.flows.reproduce_questions import split_questions
from realm.flows.reproduce_systems import SYSTEMS, ReproduceParams
from realm.model.analysis.reproduction_table import paired_markdown
from realm.schemas import REPRODUCTION_RESULTS, read_table
from tests.flows.tiny_run import tiny_params

# Facts of the first vital articles the prepared fixture holds, in the shared data's format.
TRAIN = [
    {"question": f"question {i} about the first articles?", "answers": ["the"], "dataset": "nq"} for i in range(30)
] + [{"question": f"webquestion {i}?", "answers": ["of"], "dataset": "wq"} for i in range(20)]
DEV = [{"question": "dev question about history?", "answers": ["history"], "dataset": "nq"}]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _stages_on_the_prepared_base(run_root):
    """Tiny stages whose base run is the fixture's prepared corpus, moved to `base/` (prepare is
    then cached work)."""
    stages = tiny_params(run_root / "base")
    stages.prepare.beam_args = ["--direct_num_workers=1", "--direct_running_mode=in_memory"]
    (run_root / "base").mkdir()
    for name in ("documents", "blocks", "pretrain_examples", "ict_examples", "dead_letter", "summary"):
        (run_root / name).rename(run_root / "base" / name)
    return stages


def test_held_out_questions_are_stable_disjoint_and_only_taken_where_no_dev_file_exists(tmp_path):
    params = ReproduceParams(
        qa_train=[_write(tmp_path / "train.jsonl", TRAIN)], qa_dev=[_write(tmp_path / "dev.jsonl", DEV)], dev_fraction=0.25
    )
    train, evaluation = split_questions(params, tmp_path / "split")
    again_train, again_eval = split_questions(params, tmp_path / "again")
    rows = lambda path: [json.loads(line) for line in open(path)]  # noqa: E731
    assert [p.rsplit("/", 1)[1] for p in evaluation] == ["nq.eval.jsonl", "wq.eval.jsonl"]
    assert rows(evaluation[0]) == [{**DEV[0], "answer_type": "text"}]  # nq has a dev file: none held out
    held_out = {r["question"] for r in rows(evaluation[1])}
    trained = {r["question"] for r in rows(train)}
    assert 0 < len(held_out) < 20 and not held_out & trained
    assert len(trained) + len(held_out) == len(TRAIN)
    assert rows(again_eval[1]) == rows(evaluation[1]) and rows(again_train) == rows(train)


def test_rows_that_would_repeat_another_are_not_trained_and_refused_by_name(tmp_path):
    stages = tiny_params(tmp_path)
    stages.pretrain.doc_tower = "frozen"  # the doc tower is frozen: no index refreshes
    with pytest.raises(ValidationError, match="stale_index repeats realm"):
        ReproduceParams(qa_train=["train.jsonl"], stages=stages, systems=list(SYSTEMS))
    assert ReproduceParams(qa_train=["train.jsonl"], stages=stages).effective_systems() == [
        s for s in SYSTEMS if s != "stale_index"
    ]
    stages.pretrain.retriever_frozen_steps = stages.pretrain.steps  # and the query tower never trains
    params = ReproduceParams(qa_train=["train.jsonl"], stages=stages)
    assert params.effective_systems() == ["bm25", "orqa", "realm", "random_spans", "closed_book"]
    assert {name: reason.split(":")[0] for name, reason in params.repeated_systems().items()} == {
        "realm_retriever_baseline_encoder": "repeats orqa", "baseline_retriever_realm_encoder": "repeats realm",
        "stale_index": "repeats realm",
    }
    with pytest.raises(ValidationError, match="baseline_retriever_realm_encoder repeats realm"):
        ReproduceParams(qa_train=["train.jsonl"], stages=stages, systems=["realm", "baseline_retriever_realm_encoder"])
    stages.pretrain.doc_tower = "whole"  # frozen towers refresh nothing either
    assert "stale_index" in ReproduceParams(qa_train=["train.jsonl"], stages=stages).repeated_systems()
    stages.pretrain.retriever_frozen_steps = stages.pretrain.steps - 1
    assert ReproduceParams(qa_train=["train.jsonl"], stages=stages).effective_systems() == list(SYSTEMS)


def test_only_rows_left_out_of_the_default_systems_are_named_as_not_trained(tmp_path):
    stages = tiny_params(tmp_path)
    stages.pretrain.doc_tower = "frozen"  # no index refreshes: stale_index would repeat realm
    default = ReproduceParams(qa_train=["train.jsonl"], stages=stages)
    assert list(default.left_out_systems()) == ["stale_index"]
    assert default.left_out_systems()["stale_index"].startswith("repeats realm")
    named = ReproduceParams(qa_train=["train.jsonl"], stages=stages, systems=["bm25", "orqa"])
    assert named.left_out_systems() == {}  # nobody asked for stale_index
    assert "stale_index" in named.repeated_systems()


def test_the_default_preset_trains_every_row_but_the_stale_index():
    # Pre-training trains the query tower in its second half, over cached doc vectors: the
    # retriever-swap ablations differ from their rows, and no index is refreshed to be stale.
    assert ReproduceParams(qa_train=["train.jsonl"]).effective_systems() == [s for s in SYSTEMS if s != "stale_index"]


def test_every_system_of_the_table_trains_evaluates_and_is_reported(run_root, tmp_path):
    stages = _stages_on_the_prepared_base(run_root)
    stages.evaluate.num_read = 3  # every row is evaluated with the stage's settings
    params = ReproduceParams(
        output=str(run_root), qa_train=[_write(tmp_path / "train.jsonl", TRAIN)],
        qa_dev=[_write(tmp_path / "dev.jsonl", DEV)], stages=stages, stale_factor=30,
    )
    rows = realm_reproduce(params)

    assert {(r["system"], r["dataset"]) for r in rows} == {(s, d) for s in SYSTEMS for d in ("nq", "wq")}
    table = read_table(str(run_root / "results.parquet"), REPRODUCTION_RESULTS)
    assert table.num_rows == 2 * len(SYSTEMS)
    for row in rows:
        assert 0.0 <= row["exact_match"] <= 1.0 and 0.0 <= row["zero_shot_recall_at_5"] <= 1.0
        assert row["train_seconds"] > 0 and row["seed"] == 0
    stage = json.loads((run_root / "stage_seconds.json").read_text())
    seconds = {r["system"]: r["train_seconds"] for r in rows}
    assert seconds["bm25"] == stage["prepare"] + stage["bm25_index_bm25"] + stage["finetune_bm25"]  # no ICT, no pre-training
    assert seconds["orqa"] == stage["prepare"] + stage["ict"] + stage["ict_index"] + stage["finetune_orqa"]
    assert seconds["stale_index"] == stage["prepare"] + stage["ict"] + stage["pretrain_stale_index"] + stage["finetune_stale_index"]
    # The closed-book encoder reads with ICT's query tower and index.
    assert seconds["closed_book"] == (
        stage["prepare"] + stage["ict"] + stage["pretrain_closed_book"] + stage["ict_index"] + stage["finetune_closed_book"]
    )
    for system in SYSTEMS:
        predictions = pq.read_table(run_root / "systems" / system / "predictions" / "nq.parquet")
        assert set(predictions["num_read"].to_pylist()) == {3}, system
    markdown = (run_root / "results.md").read_text()
    assert all(f"| {system} |" in markdown for system in SYSTEMS) and "Not trained" not in markdown
    assert (run_root / "results.png").stat().st_size > 0
    assert pq.read_schema(run_root / "results.parquet").names == REPRODUCTION_RESULTS.names
    assert (run_root / "stale_index" / "index").is_dir() and (run_root / "systems" / "bm25" / "bm25").is_dir()

    # Re-running one system keeps the others' rows; other settings keep none of them.
    again = realm_reproduce(params.model_copy(update={"systems": ["bm25"]}))
    table = read_table(str(run_root / "results.parquet"), REPRODUCTION_RESULTS).to_pylist()
    assert again == table  # what it returns (and `--json` prints) is the table it published
    assert [r["system"] for r in table] == [s for s in SYSTEMS for _ in ("nq", "wq")]
    assert [r for r in table if r["system"] != "bm25"] == [r for r in rows if r["system"] != "bm25"]
    assert params.model_copy(update={"stale_factor": 2}).settings_digest() != params.settings_digest()
    assert params.model_copy(update={"output": "elsewhere", "device": "cpu"}).settings_digest() == params.settings_digest()


def test_each_system_fine_tunes_on_every_seed_from_its_starts_and_is_paired_with_orqa_over_them(run_root, tmp_path):
    params = ReproduceParams(
        output=str(run_root), qa_train=[_write(tmp_path / "train.jsonl", TRAIN)],
        qa_dev=[_write(tmp_path / "dev.jsonl", DEV)], stages=_stages_on_the_prepared_base(run_root),
        systems=["bm25", "orqa"], seed=3, seeds=2,
    )
    rows = realm_reproduce(params)

    assert [(r["system"], r["seed"], r["dataset"]) for r in rows] == [
        (system, seed, dataset) for system in ("bm25", "orqa") for seed in (3, 4) for dataset in ("nq", "wq")
    ]
    systems = run_root / "systems"
    assert sorted(p.name for p in systems.iterdir()) == ["bm25", "bm25_seed4", "orqa", "orqa_seed4"]
    stage = json.loads((run_root / "stage_seconds.json").read_text())
    seconds = {(r["system"], r["seed"]): r["train_seconds"] for r in rows}
    # Every seed starts from the same ICT stage and index: only its own fine-tuning is added.
    assert seconds["orqa", 4] == stage["prepare"] + stage["ict"] + stage["ict_index"] + stage["finetune_orqa_seed4"]
    assert seconds["bm25", 3] == stage["prepare"] + stage["bm25_index_bm25"] + stage["finetune_bm25"]
    zero_shot = {(r["system"], r["seed"], r["dataset"]): r["zero_shot_recall_at_5"] for r in rows}
    assert zero_shot["orqa", 3, "nq"] == zero_shot["orqa", 4, "nq"]
    last_checkpoints = [sorted((systems / root / "checkpoints" / "finetune").glob("*/manifest.json"))[-1]
                        for root in ("orqa", "orqa_seed4")]
    assert last_checkpoints[0].parent.name == last_checkpoints[1].parent.name
    assert json.loads(last_checkpoints[0].read_text())["files"] != json.loads(last_checkpoints[1].read_text())["files"]

    markdown = (run_root / "results.md").read_text()
    paired = ("Paired against orqa over fine-tuning seeds 3, 4 (`realm compare systems/orqa,systems/orqa_seed4 "
              "systems/bm25,systems/bm25_seed4` in this folder; per dataset, one seed at a time, e.g. seed 3: "
              "`realm compare systems/orqa systems/bm25`).")
    assert f"{paired}\n\n" in markdown
    em = {(r["system"], r["seed"], r["dataset"]): r["exact_match"] for r in rows}
    mean_em = {(system, seed): (em[system, seed, "nq"] + em[system, seed, "wq"]) / 2
               for system in ("bm25", "orqa") for seed in (3, 4)}
    assert f"| orqa, orqa_seed4 | {mean_em['orqa', 3]:.3f} / {mean_em['orqa', 4]:.3f} | " \
           f"{(mean_em['orqa', 3] + mean_em['orqa', 4]) / 2:.3f} | baseline |" in markdown
    assert f"| bm25, bm25_seed4 | {mean_em['bm25', 3]:.3f} / {mean_em['bm25', 4]:.3f} |" in markdown

    # A system whose runs were lost is named, and the comparison of the other that shares its seeds stands.
    lost = [dict(row, system="realm") for row in rows if row["system"] == "bm25"]
    assert paired_markdown(rows + lost, run_root, 3).split("\n\n")[::2] == [
        paired, f"No paired test of realm against orqa: {run_root}/systems/realm: no such directory.",
    ]

    # A third seed of bm25 alone keeps its first two and orqa's, and pairs it over the seeds orqa has.
    again = realm_reproduce(params.model_copy(update={"systems": ["bm25"], "seeds": 3}))
    assert list(dict.fromkeys((r["system"], r["seed"]) for r in again)) == [
        ("bm25", 3), ("bm25", 4), ("bm25", 5), ("orqa", 3), ("orqa", 4),
    ]
    assert [r for r in again if r["seed"] != 5] == rows
    assert f"{paired} Seeds left out, not in both: bm25 5.\n\n" in (run_root / "results.md").read_text()
    # One seed of orqa again keeps its second.
    assert realm_reproduce(params.model_copy(update={"systems": ["orqa"], "seeds": 1})) == again
