"""`realm index`: another prepared corpus indexed with a trained run's doc tower, so `realm
ask/serve/evaluate --index NAME` answer from it; indexing a name again re-embeds only the blocks
that changed.

    realm index --run runs/demo --corpus runs/news --name news
"""

from __future__ import annotations

import argparse

from realm.cli.options import add_json_option, print_json


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "index", help="index another prepared corpus with a trained run's doc tower, for ask/serve/evaluate --index",
        description="Copy a prepared corpus's blocks into RUN/corpora/NAME/ and embed them with the doc tower that "
        "built the index the run fine-tuned against; indexing NAME again re-embeds only blocks whose content changed.",
    )
    parser.add_argument("--run", required=True, help="a trained run root")
    parser.add_argument("--corpus", required=True, help="a `realm prepare` output (or its blocks/)")
    parser.add_argument("--name", default="default", help="the corpus's name in the run (default: %(default)s)")
    parser.add_argument("--max-block-wordpieces", type=int,
                        help="only for a run whose index predates lineage: its pre-training block length")
    parser.add_argument("--device")
    add_json_option(parser, "print the update's counts as one JSON line")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from realm.model.networks.config import set_transformers_verbosity_error
    from realm.model.networks.device import select_device
    from realm.model.qa.other_corpus import index_other_corpus

    set_transformers_verbosity_error()
    try:
        update = index_other_corpus(args.run, args.corpus, args.name, args.max_block_wordpieces, select_device(args.device))
    except ValueError as error:  # a bad name, a BM25 run, a block length that does not match
        raise SystemExit(f"realm index: {error}") from None
    if args.json:
        print_json(update.__dict__)
    else:
        print(f"corpus {args.name!r} version {update.version}: {update.blocks} blocks ({update.embedded} embedded, "
              f"{update.reused} unchanged, {update.dropped} dropped) in {update.seconds:.0f} s -> {update.path}")
        print(f"ask from it: realm ask --run {args.run} --index {args.name} \"QUESTION\"")
    return 0
