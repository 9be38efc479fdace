"""`realm run`: the whole chain on one run root, prepare -> ICT -> pre-train -> reader warm-up ->
fine-tune -> evaluate (the Prefect flow `realm-pipeline`), then one question answered.

    realm run --preset tiny --output runs/tiny
    realm run --preset gpu --output runs/g --param finetune.epochs=2 --dry-run   # the settings, nothing run
    realm run --output runs/w --corpus wikiextractor --input 'extracted/*/wiki_*' --bert models/bert-base-uncased \
        --qa my.train.jsonl                             # a user's corpus, BERT and questions
    realm run --preset gpu --output runs/g --nproc 8     # training on 8 processes (realm.cli.launch)
"""

from __future__ import annotations

import argparse
import glob
import json
import os

from pydantic import ValidationError

from realm.cli import launch
from realm.cli.answering import print_answer, run_answerer
from realm.cli.options import add_json_option, add_run_options, add_stage_param_option, print_json, read_question_files
from realm.cli.settings import pipeline_params, reasons, record_presets, with_stage_overrides
from realm.pipelines.corpus_names import CORPORA

# The question `realm run` answers at its end, with its evidence (a demo question: never trained on).
EXAMPLE_QUESTION = "who was the commander of apollo 11"


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "run", beam_flags=True, help="the whole chain end to end (Prefect flow realm-pipeline)",
        description="prepare -> ICT -> pre-train -> reader warm-up -> fine-tune -> evaluate, each stage as the run "
        "preset sets it unless --param, --steps or --qa say otherwise; Beam's flags (after a literal --, or in "
        "--beam-args) go to prepare.",
        usage="realm run --output DIR [--preset P] [--corpus KIND --input GLOB] [--bert DIR] [--qa FILE ...] "
        "[--param STAGE.FIELD=VALUE ...] [options] [-- BEAM_FLAGS...]",
    )
    add_run_options(parser)
    parser.add_argument("--corpus", choices=CORPORA, help="the corpus to prepare, as realm prepare reads it (default: "
                        "vital, the embedded vital articles); any other needs --input, and without --qa the run stops "
                        "after pre-training (the shipped questions' answers are in the vital articles)")
    parser.add_argument("--input", metavar="GLOB", help="path or glob of the corpus files (local or gs://; not for vital)")
    add_stage_param_option(parser)
    parser.add_argument("--steps", type=int, help="pre-training's steps (the other stages: --param STAGE.steps=N or "
                        "--param finetune.epochs=N)")
    parser.add_argument("--qa", nargs="+", help="Open-QA training files for fine-tuning (default: the shipped NQ, WQ "
                        "and CT sets, on the vital corpus only); on another corpus, evaluated on --param evaluate.qa=[...] "
                        "where given, else reported by fine-tuning's validation on their held-out share")
    parser.add_argument("--dry-run", action="store_true",
                        help="print every stage's settings as one JSON line and stop: nothing is written or started")
    add_json_option(parser, "print the scores as one JSON line (for scripts)")
    launch.add_launch_options(parser)
    parser.set_defaults(handler=handle)


def run_settings(args: argparse.Namespace):
    """The flow's parameters and the run preset: the presets (`pipeline_params`), then each
    --param, then --corpus and --input, --steps and --qa, then Beam's flags."""
    params, run_preset = pipeline_params(args)
    values = with_stage_overrides(params, args.param).model_dump()
    if args.input and not args.corpus:
        raise SystemExit("realm run: --input needs --corpus KIND (one of " + ", ".join(CORPORA[1:]) + ")")
    if args.corpus:
        # A preset's article limit is the vital corpus's; a user's corpus is read whole.
        values["prepare"] |= {"corpus": args.corpus, "input": args.input} | ({"limit": None} if args.corpus != "vital" else {})
    if args.steps is not None:
        values["pretrain"]["steps"] = args.steps
    if args.qa:
        values["finetune"]["qa_train"] = args.qa
    values["prepare"]["beam_args"] += args.beam_args
    try:
        settings = type(params).model_validate(values)
    except ValidationError as error:
        raise SystemExit(f"realm run: {reasons(error)}") from None
    pattern = settings.prepare.input
    if pattern and "://" not in pattern and not glob.glob(os.path.expanduser(pattern)):
        raise SystemExit(f"realm run: --input {pattern}: no file matches")
    return settings, run_preset


def handle(args: argparse.Namespace) -> int:
    params, run_preset = run_settings(args)
    read_question_files(args.qa or [])
    if args.dry_run:
        print_json(params.model_dump(mode="json"))
        return 0
    if args.nproc > 1:
        return launch.relaunch(args)
    return launch.on_every_rank(lambda: _run(args, params, run_preset), args.device)


def _run(args: argparse.Namespace, params, run_preset) -> int:
    from realm.cli import prefect_server
    from realm.flows.realm_pipeline import realm_pipeline

    record_presets(params, run_preset)
    prefect_server.install()
    result = realm_pipeline(params)
    summary = {"evaluate": result["evaluate"], "pretrain": {k: result["pretrain"].get(k) for k in (
        "step", "accuracy_with_retrieval", "accuracy_null_only", "examples")}, "note": result.get("note")}
    if args.json:
        print_json(summary)
        return 0
    _print_scores(params.run.output, result)
    if result.get("note"):
        print(f"\n{result['note']}")
    if result.get("finetune") is None:  # stopped after pre-training: nothing answers yet
        return 0
    question = EXAMPLE_QUESTION if params.prepare.corpus == "vital" else _first_question(params.finetune.qa_train)
    print(f"\n$ realm ask --run {params.run.output} {json.dumps(question)}")
    print_answer(run_answerer(params.run.output, args.device), question)
    return 0


def _first_question(paths: list[str]) -> str:
    """A user's corpus answers a question of theirs at the end, not the vital articles' demo question."""
    from realm.model.qa.qa_data import read_qa_file

    return read_qa_file(paths[0])[0].question


def _print_scores(output: str, result: dict) -> None:
    from realm.flows.evaluate import share_text

    print(f"run root: {output}\n")
    if result["evaluate"]:
        print(f"{'questions':<12} {'n':>5} {'EM':>6} {'reader acc.':>12} {'recall@5':>9}")
    for dataset, m in result["evaluate"].items():
        print(f"{dataset:<12} {m['n']:>5} {m['em']:>6.3f} {share_text(m['reader_accuracy']):>12} {m['recall_at_5']:>9.3f}")
    pretrain = result["pretrain"]
    if pretrain["step"]:
        print(f"\nmasked-span accuracy on {pretrain['examples']} held-out pre-training examples: "
              f"{pretrain['accuracy_with_retrieval']:.3f} with retrieval, {pretrain['accuracy_null_only']:.3f} null document alone")
    else:
        print("\npre-training: 0 steps, the preset's choice: REALM pre-training has not beaten skipping it on the dev sets "
              "(docs/measurements.md, \"REALM against ORQA on three seeds\"), so the hour goes to fine-tuning")
