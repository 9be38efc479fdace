"""The grammar every `realm` command shares: a parser that refuses what it does not know, Beam's
flags kept apart, and the argument types and options several commands take.

Flags are spelled in full with hyphens (`--model-preset`); a prefix of one is refused, so a
script that works today keeps its meaning when a flag is added. `realm prepare` and `realm run`
hand Beam the flags after a literal `--` and those inside `--beam-args "..."`; any other flag a
command does not know is argparse's one-line refusal naming it, exit 2.
"""

from __future__ import annotations

import argparse
import json
import shlex
from typing import get_args

from realm.flows.params import ModelPreset, RunPreset


class RealmParser(argparse.ArgumentParser):
    """An ArgumentParser, strict about flags; `beam_flags=True` (a command that launches Beam)
    gathers Beam's flags into `args.beam_args`, in the order given."""

    def __init__(self, *args, beam_flags: bool = False, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.beam_flags = beam_flags
        if beam_flags:
            self.add_argument(
                "--beam-args", dest="beam_args", type=shlex.split, action="extend", default=[], metavar='"FLAGS"',
                help='Beam pipeline flags in one quoted string, e.g. --beam-args "--runner DataflowRunner --project P" '
                "(or write them after a literal --)",
            )

    def parse_known_args(self, args=None, namespace=None):
        # Subcommand parsers get their own arguments with the `--` still in them.
        if not self.beam_flags or args is None or "--" not in args:
            return super().parse_known_args(args, namespace)
        cut = args.index("--")
        namespace, extra = super().parse_known_args(args[:cut], namespace)
        namespace.beam_args = [*namespace.beam_args, *args[cut + 1 :]]
        return namespace, extra


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options of a command that trains a run: its root, its presets, device and seed."""
    parser.add_argument("--output", required=True, metavar="DIR", help="run root")
    parser.add_argument(
        "--preset", choices=list(get_args(RunPreset)),
        help="run preset, every stage's settings: tiny: 300 articles, a random 2-layer model, the plumbing "
        "only; default: the vital corpus on a CPU; gpu: full-size settings for a CUDA machine (default: the one the "
        "run at --output was started with, else default)",
    )
    parser.add_argument(
        "--model-preset", choices=list(get_args(ModelPreset)),
        help="the model every component is built with (default: the one the run at --output was made with, else the "
        "run preset's); a run keeps one, its checkpoints load into no other",
    )
    parser.add_argument(
        "--bert", metavar="DIR",
        help="Hugging Face BERT directory (save_pretrained: config.json, weights, vocab.txt; e.g. bert-base-uncased) the "
        "towers, encoder and reader start from, a BertForMaskedLM's MLM head too, its vocabulary cutting every "
        "wordpiece (default: the one the run at --output was made with, else the model preset's own); a run keeps one",
    )
    parser.add_argument("--device", help="torch device (default: CUDA when present, else CPU)")
    parser.add_argument("--seed", type=int, help="seed of every stage (default: the run preset's, 0)")


def add_index_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index", metavar="NAME",
                        help="answer from the corpus NAME indexed for the run (`realm index`) instead of its own")


def add_stage_param_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--param", action="append", default=[], metavar="STAGE.FIELD=VALUE",
                        help="override any stage's parameter, e.g. --param finetune.epochs=2 (repeatable; STAGE one "
                        "of prepare, ict, pretrain, warmup, finetune, evaluate)")


def add_json_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=what)


def add_min_confidence_option(parser: argparse.ArgumentParser, what: str) -> None:
    from realm.model.qa.risk_coverage import MIN_CONFIDENCE

    parser.add_argument("--min-confidence", type=probability, default=MIN_CONFIDENCE, metavar="P",
                        help=f"{what} (the run's calibrated probability; default: %(default)s, every question answered)")


def probability(value: str) -> float:
    number = float(value)
    if not 0.0 <= number <= 1.0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be a probability between 0 and 1, got {value}")
    return number


def positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def dataset_names(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"an empty dataset name in {value!r}")
    return names


def read_question_files(paths: list[str]) -> None:
    """Read every question file a command names, so a missing or malformed one stops it with one
    line before a Prefect server starts or a flow logs the error with its traceback."""
    from realm.model.qa.qa_data import read_qa_file

    for path in paths:
        read_qa_file(path)


def print_json(value) -> None:
    print(json.dumps(value, sort_keys=True, default=str))
