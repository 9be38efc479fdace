"""The `realm` command: one entry point over the Beam pipelines and the Prefect flows. Each
command lives in `realm.cli.commands`; this module assembles their parsers, runs the one asked
for, and turns the errors a user can fix into one line and exit 2.

    realm prepare --corpus vital --output runs/vital
    realm run --preset tiny --output runs/tiny
    realm ask --run runs/tiny "who was the commander of apollo 11"
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from realm.cli import stopping
from realm.cli.commands import ask, calibrate, compare, evaluate, index, info, prepare, reproduce, run, serve, train
from realm.cli.options import RealmParser

# The ephemeral Prefect server's telemetry writes race the first flow run for the SQLite lock
# ("database is locked" tracebacks), and there is no network to send it to anyway.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

# In the order `realm --help` lists them.
COMMANDS = (prepare, run, train, evaluate, calibrate, compare, reproduce, ask, serve, info, index)

DESCRIPTION = """\
REALM: retrieval-augmented language model pre-training, as a data pipeline.

prepare   Beam: read a corpus and build the Parquet artifacts training needs:
            read      documents/          the corpus as (doc_id, title, text, url, date)
            chunk     blocks/             <= 288-wordpiece retrieval blocks ([CLS] title [SEP] body [SEP])
            entities  block_entities/     each block's named entities (spaCy NER), the reader's entity-type input
            salient   pretrain_examples/  one sentence per example, salient spans (spaCy NER + dates)
            trivial   pretrain_examples/  forbidden_block_ids: every block holding the sentence verbatim
            ict       ict_examples/       Inverse Cloze Task pairs to warm-start the retriever
          Rejected records go to dead_letter/ (stage, key, reason); each stage's counts show
          on stderr while it runs and print as a table at the end.
run       Prefect: the whole chain on one run root (prepare, then the stages below).
train     Prefect, one stage at a time:
            ict       warm-start both retriever towers on the Inverse Cloze Task
            pretrain  REALM pre-training: salient-span MLM over the top-k retrieved blocks
                      (null document included, trivial retrievals excluded), with the
                      MIPS index re-embedded and swapped in asynchronously every N steps
            warmup    the reader's span-selection warm-up on cloze questions from the corpus
                      (a salient span becomes a wh-word; the sentence's own blocks never retrieved)
            finetune  Open-QA: query tower + span reader over the top 5 blocks, index fixed
                      (one softmax over every span of the read blocks, best validated checkpoint kept)
evaluate  Prefect: exact match, reader accuracy and answer recall@1/5/20 per dataset; predictions/ Parquet;
          the answer probabilities' calibration error and the EM of the most confident answers.
calibrate Prefect: calibrate a trained run's answer probabilities on the questions fine-tuning held out
          (fine-tuning does it at its end; this is for runs fine-tuned before).
compare   evaluated or pre-trained runs side by side: bootstrap 95% intervals and paired tests
          against the first (answers to questions; masked spans of the same pre-training examples).
reproduce Prefect: REALM vs ICT-only (ORQA) vs BM25 + reader and the paper's ablations,
          trained and evaluated on one corpus and question set; a table, a chart, Parquet.
ask       answer a question with a trained run, showing the evidence blocks.
serve     the same over HTTP: POST /ask, GET /blocks/{id}, GET /health, and a web page at /.
info      what a run folder holds: stages, checkpoints, what answers, every index's lineage.
index     index another prepared corpus with a trained run's doc tower (ask/serve/evaluate --index NAME
          answer from it); indexing a name again re-embeds only the blocks that changed.

A run remembers its presets: train, evaluate, ask and serve on it use them unless told otherwise.
Flags are spelled in full; one a command does not know is refused. Beam's flags go to prepare
and run after a literal -- (or inside --beam-args "...").
"""


def build_parser() -> argparse.ArgumentParser:
    parser = RealmParser(prog="realm", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (also REALM_DEBUG=1)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def cli() -> int:
    """The `realm` console command: `main` on the command line, stopped within seconds by
    SIGTERM or Ctrl-C with the shell's status for the signal (`realm.cli.stopping`)."""
    stopping.install()
    try:
        return main()
    except stopping.Stopped as stop:
        print(f"realm: stopped by {stop}; the same command again resumes from the last checkpoint", file=sys.stderr)
        return stopping.exit_status(stop.signum)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    """The command's exit code; a refusal or an error a user can fix as one line on stderr, exit 2."""
    from realm.model.publish import IntegrityError
    from realm.model.qa.qa_data import QAFormatError
    from realm.schemas import ArtifactError
    from realm.schemas.writer_lock import WriterBusy

    try:
        return args.handler(args)
    except SystemExit as refusal:
        if not isinstance(refusal.code, str):  # an exit code (a command's, uvicorn's) passes through
            raise
        # A refusal naming its reason: the same one line and exit code as the errors below
        # (Python would exit 1 with it).
        print(refusal.code, file=sys.stderr)
        return 2
    except (QAFormatError, ArtifactError, IntegrityError, FileNotFoundError, WriterBusy) as error:
        # Errors a user can fix (a second writer: by waiting): one line saying what and where, not a traceback.
        if args.debug or os.environ.get("REALM_DEBUG"):
            raise
        print(f"realm {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(cli())
