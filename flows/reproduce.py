"""`realm-reproduce`: REALM vs ICT-only (ORQA) vs BM25 + reader, with the paper's ablations.

REALM's claim is an ordering (Table 1 and 2 of the paper): pre-training with retrieval makes
both the retriever and the reader better than an ICT-only retriever and a sparse baseline.
This flow trains and evaluates, on one corpus and one set of questions, the systems:

    bm25                              BM25 + reader (the paper's BERT-Baseline)
    orqa                              ICT warm start + fine-tuning
    realm                             ICT -> REALM pre-training + fine-tuning
    realm_retriever_baseline_encoder  REALM's query tower and index, reader from the warm start
    baseline_retriever_realm_encoder  ICT's query tower and index, reader from REALM's encoder
    random_spans                      REALM pre-trained on random instead of salient spans
    stale_index                       REALM pre-trained with an index refreshed `stale_factor`x less often
                                      (x30 of the presets' refresh interval exceeds their step counts:
                                      the index of the ICT towers is then never refreshed while
                                      pre-training; fine-tuning still reads one built at the end)
    closed_book                       the same salient-span pre-training with the null document alone
                                      (no retrieval), reader from its encoder, ICT's query tower and index

A row whose training would repeat another's under the stages' settings is not trained, and the
table says which it repeats (`ReproduceParams.left_out_systems`; a `--systems` list names the
rows, and one in it that would repeat is refused): with the retriever frozen for all of
pre-training, REALM's retriever is ICT's, so the two retriever-swap ablations are the orqa and
realm rows again; with the doc tower frozen (the `default` preset caches doc
vectors and trains only the query tower), no index is refreshed, so stale_index is the realm
row again.

Layout under `output`: `base/` holds the prepared corpus, the ICT warm start and its index
(`base/index/<ict step>/`); each pre-training variant has a run root of its own (`realm/`,
`random_spans/`, `stale_index/`, `closed_book/`) and each system one for its fine-tuning and
predictions (`systems/<name>/`; with `seeds` > 1, one more per further fine-tuning seed,
`systems/<name>_seed<seed>/`, from the same starts), all reading `base/`'s corpus through
symbolic links. Every stage is a cached flow, so a re-run skips what is done and an
interrupted one resumes. Results: `results.parquet` (schema `REPRODUCTION_RESULTS`, a row per
system, seed and dataset), `results.md` (ending with each system paired with orqa on the same
questions: McNemar's test on one seed, the sign-flip test over several), `results.png`, and
the same table as a Prefect artifact; an invocation keeps the rows an earlier one published
under the same settings for the systems and seeds it does not train (`systems`, `seeds`). `qa/split.json` records a
digest of the question split; a re-run whose split differs (other files, seed or fraction)
stops instead of evaluating models trained on the old one. Wall time per system and seed adds
every stage it needs, shared ones included, and that seed's fine-tuning (the cost of training
that row alone); a stage's time is recorded the first time it completes, so cache hits on a
re-run do not count as free.

The pieces: the systems and the flow's parameters in `realm.flows.reproduce_systems`, the
question split in `reproduce_questions`, run roots and stage times in `reproduce_runs`, the
retriever index and zero-shot recall tasks in `retriever_tasks`, the table's systems, files and
markdown in `realm.model.analysis.reproduction_table`.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from realm.flows.evaluate import evaluate
from realm.flows.finetune_openqa import build_bm25_index, finetune_openqa
from realm.flows.ict_warm_start import ict_warm_start
from realm.flows.prepare import realm_prepare
from realm.flows.realm_pretrain import realm_pretrain
from realm.flows.reproduce_questions import split_questions
from realm.flows.reproduce_runs import StageTimer, linked_run
from realm.flows.reproduce_systems import SPECS, ReproduceParams, pretrain_variant
from realm.flows.retriever_tasks import build_retriever_index, zero_shot_recall
from realm.model.analysis.reproduction_table import earlier_rows, system_root, table_rows, write_results


@flow(name="realm-reproduce")
def realm_reproduce(params: ReproduceParams) -> list[dict]:
    from realm.model.training.finetune_start import WARM_START

    logger = get_run_logger()
    root = Path(params.output).expanduser().resolve()
    stages = params.effective_stages()
    base = stages.run.model_copy(update={"output": str(root / "base"), "seed": params.seed, "device": params.device})
    timer = StageTimer(root / "stage_seconds.json")
    train_file, eval_files = split_questions(params, root / "qa")
    evaluation = stages.evaluate.model_copy(update={"qa": eval_files})  # its num_read / num_retrieve kept
    logger.info("fine-tuning on %s; evaluating on %s", train_file, ", ".join(eval_files))

    with timer("prepare"):
        realm_prepare(base, stages.prepare)
    specs = {name: SPECS[name] for name in params.effective_systems()}
    repeated = params.left_out_systems()
    for name, reason in repeated.items():
        logger.info("not training %s: it %s", name, reason)  # `systems` naming one is refused
    ict = ict_index = None
    if any(spec.retriever != "bm25" for spec in specs.values()):
        with timer("ict"):
            ict = ict_warm_start(base, stages.ict)
        with timer("ict_index"):
            ict_index = build_retriever_index(
                base.output, base.model_preset, ict["checkpoint"], stages.pretrain.max_block_wordpieces,
                stages.pretrain.keep_checkpoints, base.device,
            )

    pretrained: dict[str, dict] = {}

    def pretrain(variant: str) -> dict:
        """Pre-train `variant` the first time a system needs it."""
        if variant not in pretrained:
            with timer(f"pretrain_{variant}"):
                pretrained[variant] = realm_pretrain(
                    linked_run(root / variant, base), pretrain_variant(variant, stages.pretrain, params.stale_factor),
                    init_retriever=ict["checkpoint"],
                )
        return pretrained[variant]

    # System by system and seed by seed, publishing the table after each, so a long run shows its rows as they come.
    settings = params.settings_digest()
    kept = earlier_rows(root, settings, [(name, seed) for name in specs for seed in params.fine_tuning_seeds()])
    rows = []
    for name, spec in specs.items():
        run = linked_run(system_root(root, name, params.seed, params.seed), base)
        source = pretrain(spec.pretrain) if spec.pretrain else None
        needed = ["prepare"] + ([] if spec.retriever == "bm25" else ["ict"])
        needed += [f"pretrain_{spec.pretrain}"] if spec.pretrain else []
        if spec.retriever == "bm25":
            with timer(f"bm25_index_{name}"):
                query_checkpoint, index_path = None, build_bm25_index(run.output)
            needed.append(f"bm25_index_{name}")
        elif spec.retriever == "ict":
            query_checkpoint, index_path = ict["checkpoint"], ict_index
            needed.append("ict_index")
        else:
            query_checkpoint, index_path = source["checkpoint"], source["index"]
        reader_init = source["checkpoint"] if spec.reader == "pretrain" else WARM_START
        zero_shot = zero_shot_recall(run.output, run.model_preset, eval_files, index_path, query_checkpoint, run.device)

        finetune_params, dropped = stages.finetune.for_retriever(
            "bm25" if spec.retriever == "bm25" else "dense", qa_train=[train_file]
        )
        if dropped:
            logger.info("%s: %s left at the default, acting through a query tower BM25 lacks", name, ", ".join(dropped))
        for seed in params.fine_tuning_seeds():
            # Only the seed differs: every seed starts from the same checkpoints and reads the same index.
            seeded = linked_run(system_root(root, name, seed, params.seed), base).model_copy(update={"seed": seed})
            stage = f"finetune_{Path(seeded.output).name}"
            with timer(stage):
                finetuned = finetune_openqa(seeded, finetune_params, init_checkpoint=query_checkpoint,
                                            index_path=index_path, reader_init=reader_init)
            metrics = evaluate(seeded, evaluation, checkpoint=finetuned["checkpoint"], index_path=index_path)
            seconds = timer.total(needed + [stage])
            for dataset, m in metrics.items():
                rows.append({
                    "system": name, "dataset": dataset, "n": m["n"], "exact_match": m["em"],
                    "reader_accuracy": m["reader_accuracy"], "recall_at_5": m["recall_at_5"],
                    "zero_shot_recall_at_5": zero_shot[dataset], "train_seconds": seconds, "seed": seed,
                    "settings_sha256": settings,
                })
            logger.info("%s, seed %d: %s", name, seed, ", ".join(f"{d} EM {m['em']:.3f}" for d, m in metrics.items()))
            _publish_results(kept + rows, root, repeated, params.seed)
    return table_rows(kept + rows)


def _publish_results(rows: list[dict], root: Path, repeated: dict[str, str], first_seed: int) -> None:
    """The table's files under `root` (`write_results`) and the same table as Prefect artifacts."""
    markdown = write_results(rows, root, repeated, first_seed)
    create_table_artifact(key="realm-reproduce-results", table=table_rows(rows),
                          description="REALM vs ORQA vs BM25, per seed and dataset")
    create_markdown_artifact(key="realm-reproduce-table", markdown=markdown, description="the reproduction table")
