"""`realm-pipeline`: the whole chain, prepare -> ICT -> pre-train -> reader warm-up -> fine-tune -> evaluate.

    realm run --preset tiny --output runs/tiny         # the plumbing on 300 articles, a random 2-layer model
    realm run --output runs/demo                       # the default run preset: the vital corpus
    realm run --preset gpu --output runs/g --dry-run   # every stage's settings, nothing run

Each stage is a flow of its own (runnable and schedulable alone); this parent composes them,
so the Prefect UI shows one run with six child runs. Finished stages are cache hits on a
re-run; an interrupted stage resumes from its last checkpoint.
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


@flow(name="realm-pipeline")
def realm_pipeline(params: PipelineParams = PipelineParams.preset("default")) -> dict:
    logger = get_run_logger()
    run = params.run
    counts = realm_prepare(run, params.prepare)
    logger.info("prepared %d blocks and %d pre-training examples", counts["chunk"]["blocks"], counts["salient"]["sentences"])
    ict = ict_warm_start(run, params.ict)
    pretrain = realm_pretrain(run, params.pretrain, init_retriever=ict["checkpoint"])
    warmup = reader_warmup(run, params.warmup, init_checkpoint=pretrain["checkpoint"], index_path=pretrain["index"])
    start = warmup["checkpoint"] or pretrain["checkpoint"]
    finetune = finetune_openqa(run, params.finetune, init_checkpoint=start, index_path=pretrain["index"])
    metrics = evaluate(run, params.evaluate, checkpoint=finetune["checkpoint"], index_path=pretrain["index"])
    return {"ict": ict, "pretrain": pretrain, "warmup": warmup, "finetune": finetune, "evaluate": metrics}
