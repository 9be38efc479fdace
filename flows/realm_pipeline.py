"""`realm-pipeline`: the whole chain, prepare -> ICT -> pre-train -> reader warm-up -> fine-tune -> evaluate.

    realm run --preset tiny --output runs/tiny         # the plumbing on 300 articles, a random 2-layer model
    realm run --output runs/demo                       # the default run preset: the vital corpus
    realm run --preset gpu --output runs/g --dry-run   # every stage's settings, nothing run

Each stage is a flow of its own (runnable and schedulable alone); this parent composes them,
so the Prefect UI shows one run with six child runs. Finished stages are cache hits on a
re-run; an interrupted stage resumes from its last checkpoint.

On a user's corpus (`prepare.corpus` other than vital) the shipped questions have no answers to
find, so the chain fine-tunes only on the questions given (`finetune.qa_train`, `realm run
--qa`) and, given none, stops after pre-training. It evaluates on `evaluate.qa` where given;
on a user's corpus without it the shipped held-out sets would measure nothing, so evaluation is
left out and fine-tuning's validation on the held-out share of the given questions stands for
it. The result's `note` says which, in one line.
"""

from __future__ import annotations

from prefect import flow, get_run_logger

from realm.flows.evaluate import evaluate
from realm.flows.finetune_openqa import finetune_openqa
from realm.flows.ict_warm_start import ict_warm_start
from realm.flows.params import PipelineParams
from realm.flows.prepare import realm_prepare
from realm.flows.reader_warmup import reader_warmup
from realm.flows.realm_pretrain import realm_pretrain


def stop_after_pretraining(params: PipelineParams) -> str | None:
    """Why the chain stops after pre-training (one line), None where it fine-tunes."""
    if params.prepare.corpus == "vital" or params.finetune.qa_train:
        return None
    return (f"stopped after pre-training: no questions to fine-tune on for corpus {params.prepare.corpus!r} (the shipped "
            f"ones' answers are in the vital articles); fine-tune with realm train finetune --output {params.run.output} "
            "--qa FILE ...")


def evaluation_left_out(params: PipelineParams, finetune: dict) -> str | None:
    """Why evaluation does not run (one line, with the validation that stands for it), None where it does."""
    if params.prepare.corpus == "vital" or params.evaluate.qa:
        return None
    em = finetune.get("best_validation_em")
    measured = f"exact match {em:.3f} on" if em is not None else "none of"
    return (f"evaluation left out (the shipped held-out questions are about the vital articles): fine-tuning's "
            f"validation, {measured} the {finetune.get('validation_questions', 0)} questions of --qa it held out; "
            f"evaluate with realm evaluate --run {params.run.output} --qa FILE ...")


@flow(name="realm-pipeline")
def realm_pipeline(params: PipelineParams = PipelineParams.preset("default")) -> dict:
    logger = get_run_logger()
    run = params.run
    counts = realm_prepare(run, params.prepare)
    logger.info("prepared %d blocks and %d pre-training examples", counts["chunk"]["blocks"], counts["salient"]["sentences"])
    ict = ict_warm_start(run, params.ict)
    pretrain = realm_pretrain(run, params.pretrain, init_retriever=ict["checkpoint"])
    if note := stop_after_pretraining(params):
        logger.info(note)
        return {"ict": ict, "pretrain": pretrain, "warmup": None, "finetune": None, "evaluate": {}, "note": note}
    warmup = reader_warmup(run, params.warmup, init_checkpoint=pretrain["checkpoint"], index_path=pretrain["index"])
    start = warmup["checkpoint"] or pretrain["checkpoint"]
    finetune = finetune_openqa(run, params.finetune, init_checkpoint=start, index_path=pretrain["index"])
    if note := evaluation_left_out(params, finetune):
        logger.info(note)
        metrics = {}
    else:
        metrics = evaluate(run, params.evaluate, checkpoint=finetune["checkpoint"], index_path=pretrain["index"])
    return {"ict": ict, "pretrain": pretrain, "warmup": warmup, "finetune": finetune, "evaluate": metrics, "note": note}
