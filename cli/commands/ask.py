"""`realm ask`: answer a question with a trained run, showing the evidence blocks.

    realm ask --run runs/demo "who was the commander of apollo 11"
    realm ask --run runs/demo --min-confidence 0.3 "who was the commander of apollo 11"   # no answer below p = 0.3
"""

from __future__ import annotations

import argparse

from realm.cli.answering import EVIDENCE_BLOCKS, NUM_READ, print_answer, run_answerer
from realm.cli.options import add_index_option, add_min_confidence_option, positive_int


def add_parser(commands) -> None:
    parser = commands.add_parser("ask", help="answer a question with a trained run, with its evidence")
    parser.add_argument("--run", required=True, help="run root")
    parser.add_argument("question")
    parser.add_argument("--num-read", type=positive_int, default=NUM_READ, help="blocks the reader reads (default: %(default)s)")
    parser.add_argument("--evidence", type=int, default=EVIDENCE_BLOCKS,
                        help="retrieved blocks shown (default: %(default)s, as POST /ask returns)")
    parser.add_argument("--device")
    add_min_confidence_option(parser, "no answer, only the evidence, when the answer's probability is below P")
    add_index_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if not args.question.strip():
        raise SystemExit("realm ask: the question is empty")
    print_answer(
        run_answerer(args.run, args.device, args.index), args.question, args.num_read, args.evidence, args.min_confidence
    )
    return 0
