"""`realm reproduce`: REALM against ICT-only (ORQA) and BM25 + reader, with the paper's ablations,
trained and evaluated on one corpus and question set (the Prefect flow `realm-reproduce`).

    realm reproduce --qa-dir ../shared/data/qa --output runs/reproduce --preset default
    realm reproduce --qa-dir ../shared/data/qa --systems orqa realm --seeds 3 --param pretrain.doc_tower=whole
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, get_args

from pydantic import ValidationError

from realm.cli.options import add_json_option, add_stage_param_option, positive_int, print_json, read_question_files
from realm.cli.settings import reasons, with_stage_overrides
from realm.flows.params import RunPreset

if TYPE_CHECKING:
    from realm.flows.reproduce_systems import ReproduceParams

# The `realm reproduce` options that are `ReproduceParams` fields of the same name, passed on only
# when given, so that each default is the field's.
REPRODUCE_FIELDS = ("output", "preset", "seed", "seeds", "device", "systems")


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "reproduce", help="REALM vs ICT-only (ORQA) vs BM25 + reader, with ablations (Prefect flow realm-reproduce)",
        description="Train and evaluate every system of the reproduction table on one corpus and question set.",
    )
    parser.add_argument("--output", help="root of every run it trains (default: runs/reproduce)")
    parser.add_argument("--preset", choices=list(get_args(RunPreset)),
                        help="run preset every system's stages are sized by: tiny: the plumbing; default: a CPU's "
                        "settings; gpu: full-size settings for a CUDA machine (default: default)")
    parser.add_argument("--qa-dir", help="a folder of <dataset>.train.jsonl and <dataset>.dev.jsonl files")
    parser.add_argument("--qa-train", nargs="+", default=[], help="Open-QA training files")
    parser.add_argument("--qa-dev", nargs="+", default=[], help="Open-QA evaluation files")
    parser.add_argument("--systems", nargs="+", help="a subset of the rows (default: all)")
    parser.add_argument("--seed", type=int,
                        help="seed of the question split, the corpus, ICT, pre-training and the first fine-tuning")
    parser.add_argument("--seeds", type=positive_int,
                        help="fine-tuning runs per system (seeds --seed, --seed + 1, ...), each system paired with orqa "
                        "over the seeds both have")
    parser.add_argument("--device")
    add_stage_param_option(parser)
    add_json_option(parser, 'end with one JSON line {"<system>": {"<dataset>": {"em", "em_per_seed", "seeds", '
                    '"recall_at_5", "zero_shot_recall_at_5", "n"}}}, em and recall_at_5 averaged over the seeds')
    parser.set_defaults(handler=handle)


def question_files(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The (training, evaluation) question files: those named, then --qa-dir's."""
    qa_train, qa_dev = list(args.qa_train), list(args.qa_dev)
    if args.qa_dir:
        qa_train += sorted(str(p) for p in Path(args.qa_dir).glob("*.train.jsonl"))
        qa_dev += sorted(str(p) for p in Path(args.qa_dir).glob("*.dev.jsonl"))
    return qa_train, qa_dev


def reproduce_params(args: argparse.Namespace) -> ReproduceParams:
    """The reproduction's parameters from the command line, refused in one line before any
    Prefect server starts (inside the flow a refused setting is a bug, and keeps its traceback)."""
    from realm.flows.reproduce_systems import ReproduceParams

    qa_train, qa_dev = question_files(args)
    if not qa_train:
        raise SystemExit("realm reproduce: no training questions (pass --qa-dir or --qa-train)")
    read_question_files(qa_train + qa_dev)
    given = {name: getattr(args, name) for name in REPRODUCE_FIELDS if getattr(args, name) is not None}
    try:
        if args.param:  # on the preset's stages; the systems are checked against the stages they make
            preset = ReproduceParams(qa_train=qa_train, **{k: v for k, v in given.items() if k != "systems"})
            given["stages"] = with_stage_overrides(preset.effective_stages(), args.param)
        return ReproduceParams(qa_train=qa_train, qa_dev=qa_dev, **given)
    except ValidationError as error:
        raise SystemExit(f"realm reproduce: {reasons(error)}") from None


def handle(args: argparse.Namespace) -> int:
    params = reproduce_params(args)
    from realm.cli import prefect_server
    from realm.flows.reproduce import realm_reproduce
    from realm.model.analysis.reproduction_table import json_table

    prefect_server.install()
    rows = realm_reproduce(params)
    print((Path(params.output) / "results.md").read_text())
    if args.json:
        print_json(json_table(rows))
    return 0
