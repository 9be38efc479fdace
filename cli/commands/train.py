"""`realm train STAGE`: one training stage's Prefect flow on a run root, with the run's presets.

    realm train finetune --output runs/demo --param epochs=2 --qa nq.train.jsonl
    realm train pretrain --output runs/demo --nproc 2      # on 2 processes (torchrun: realm.cli.launch)
"""

from __future__ import annotations

import argparse

from realm.cli import launch
from realm.cli.options import add_run_options, print_json, read_question_files
from realm.cli.settings import pipeline_params, record_presets, with_overrides

STAGES = ("ict", "pretrain", "warmup", "finetune")


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "train", help="one training stage (Prefect flow)",
        description="Train one stage of the run at --output with the run's presets (those it was started with, "
        "unless --preset or --model-preset say otherwise) and the stage's settings from them.",
    )
    parser.add_argument("stage", choices=STAGES)
    add_run_options(parser)
    parser.add_argument("--steps", type=int, help="override the preset's number of steps")
    parser.add_argument("--param", action="append", default=[], metavar="FIELD=VALUE",
                        help="override any stage parameter, e.g. --param doc_tower=whole (repeatable)")
    parser.add_argument("--qa", nargs="+", help="finetune: Open-QA training files (default: the shipped NQ, WQ and CT sets)")
    launch.add_launch_options(parser)
    parser.set_defaults(handler=handle)


def stage_settings(args: argparse.Namespace):
    """The run's parameters (`pipeline_params`), its run preset, and the stage's own with --param,
    --steps and --qa applied."""
    params, run_preset = pipeline_params(args)
    stage = with_overrides(getattr(params, args.stage), args.param)
    if args.steps is not None:
        if "steps" not in type(stage).model_fields:
            raise SystemExit(f"--steps: the {args.stage} stage is sized in epochs; pass --param epochs=N")
        stage.steps = args.steps
    if args.qa:
        if args.stage != "finetune":
            raise SystemExit(f"--qa: the {args.stage} stage reads no question files (fine-tuning does)")
        stage.qa_train = args.qa
    return params, run_preset, stage


def handle(args: argparse.Namespace) -> int:
    params, run_preset, stage = stage_settings(args)
    read_question_files(args.qa or [])
    if args.nproc > 1:
        return launch.relaunch(args)
    return launch.on_every_rank(lambda: _train(args, params, run_preset, stage), args.device)


def _train(args: argparse.Namespace, params, run_preset, stage) -> int:
    from realm.cli import prefect_server

    if args.stage == "ict":
        from realm.flows.ict_warm_start import ict_warm_start as stage_flow
    elif args.stage == "pretrain":
        from realm.flows.realm_pretrain import realm_pretrain as stage_flow
    elif args.stage == "warmup":
        from realm.flows.reader_warmup import reader_warmup as stage_flow
    else:
        from realm.flows.finetune_openqa import finetune_openqa as stage_flow
    record_presets(params, run_preset)
    prefect_server.install()
    print_json(stage_flow(params.run, stage))
    return 0
