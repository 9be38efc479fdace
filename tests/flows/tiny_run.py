"""The run parameters the flow tests share."""

from realm.flows.demo import DATA_DIR
from realm.flows.params import PipelineParams


def tiny_params(run_root) -> PipelineParams:
    """The tiny preset, cut down further so the whole chain runs in about a minute."""
    params = PipelineParams.preset("tiny", output=str(run_root))
    params.prepare.limit = 60
    params.ict = params.ict.model_copy(update={"steps": 6, "batch_size": 8, "checkpoint_every": 3, "heldout_examples": 16})
    # A refresh every 2 steps: the one of step 2 goes into use at step 4, when the next starts.
    params.pretrain = params.pretrain.model_copy(
        update={"steps": 6, "batch_size": 2, "checkpoint_every": 2, "refresh_every": 2, "log_every": 1, "heldout_examples": 8}
    )
    params.warmup = params.warmup.model_copy(update={"questions": 24, "batch_size": 2, "checkpoint_every": 2})
    # CuratedTrec's 295 shipped training questions: a few have an answer in 60 articles.
    params.finetune = params.finetune.model_copy(
        update={"epochs": 1, "batch_size": 2, "checkpoint_every": 2, "qa_train": [str(DATA_DIR / "qa" / "ct.train.jsonl")]}
    )
    return params
