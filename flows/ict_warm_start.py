"""`realm-ict-warm-start`: train both retriever towers on the Inverse Cloze Task (ORQA's warm start).

In-batch negatives over `ict_examples/`; checkpoints under `<root>/checkpoints/ict/`; the
held-out retrieval accuracy is published as an artifact. Re-running after a crash resumes
from the last checkpoint; re-running a finished stage with the same inputs is a cache hit.
"""

from __future__ import annotations

from functools import partial

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from realm.flows.caching import cached_in_run
from realm.schemas.leftovers import remove_leftovers
from realm.model.networks.presets import record_model_preset
from realm.schemas.run_layout import RunLayout
from realm.flows.params import IctParams, RunParams
from realm.flows.reporting import TrainingReporter


@task(name="realm-train-ict")
def train_ict_stage(output: str, model_preset: str, params: IctParams, seed: int, device: str | None) -> dict:
    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from realm.model.training.distributed import lead, world_from_environment
    from realm.model.training.train_ict import IctTrainer

    layout = RunLayout.at(output)
    with layout.training_lock():
        # Under torchrun the other ranks build the same trainer and train beside this one.
        world = world_from_environment()
        trainer = lead(world, partial(
            IctTrainer, layout.ict_examples, layout.checkpoints("ict"),
            ModelConfig.preset(model_preset, bert_dir=layout.bert_dir()), params, device=select_device(device), seed=seed,
        ))
        get_run_logger().info("ICT from step %d to %d on %d process(es)", trainer.step, params.steps, world.size)
        reporter = TrainingReporter("ict", layout.reports, trainer.step, params.steps)
        result = trainer.run(reporter)
    reporter.publish_curves()
    get_run_logger().info(
        "ICT: held-out top-1 retrieval accuracy %.3f on %d examples (checkpoint %s)",
        result["heldout_accuracy"], result["heldout_examples"], result["checkpoint"],
    )
    create_markdown_artifact(
        key="realm-ict-heldout",
        markdown=f"## ICT warm start\n\n| metric | value |\n|---|---|\n"
        f"| held-out top-1 retrieval accuracy | {result['heldout_accuracy']:.3f} |\n"
        f"| held-out examples | {result['heldout_examples']} |\n| steps | {result['step']} |\n"
        f"| checkpoint | `{result['checkpoint']}` |",
        description="ICT retrieval accuracy on held-back examples",
    )
    return result


@flow(name="realm-ict-warm-start")
def ict_warm_start(run: RunParams = RunParams(), params: IctParams = IctParams()) -> dict:
    layout = RunLayout.at(run.output)
    remove_leftovers(layout.root)
    record_model_preset(layout, run.model_preset, bert_dir=run.bert_dir)
    stage = cached_in_run(train_ict_stage, layout, reads=[layout.ict_examples], writes=[layout.checkpoints("ict")])
    return stage(str(layout.root), run.model_preset, params, run.seed, run.device)
