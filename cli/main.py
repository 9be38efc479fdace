"""The `realm` command: one entry point over the pipelines (and, as they land, the flows).

    realm prepare --corpus vital --output runs/vital
    realm prepare --help
"""

from __future__ import annotations

import argparse
import logging
import sys

DESCRIPTION = """\
REALM: retrieval-augmented language model pre-training, as a data pipeline.

prepare   Beam: read a corpus and build the Parquet artifacts training needs:
            read      documents/          the corpus as (doc_id, title, text, url, date)
            chunk     blocks/             <= 288-wordpiece retrieval blocks ([CLS] title [SEP] body [SEP])
            salient   pretrain_examples/  one sentence per example, salient spans (spaCy NER + dates)
            trivial   pretrain_examples/  forbidden_block_ids: every block holding the sentence verbatim
            ict       ict_examples/       Inverse Cloze Task pairs to warm-start the retriever
          Rejected records go to dead_letter/ (stage, key, reason); counts print at the end.
"""

PREPARE_EPILOG = """\
Corpora (--corpus):
  vital          the embedded default: ~10k Wikipedia vital-article summaries (no --input)
  wikipedia-xml  MediaWiki XML export dumps, *.xml or *.xml.bz2 (streamed)
  wikiextractor  WikiExtractor --json output (JSON lines id/url/title/text)
  ccnews-jsonl   CC-News JSON lines (news-please or HF cc_news fields)
  warc           WARC files of HTML pages (main text extracted with trafilatura)
  documents      Parquet or JSONL files with the documents/ schema

Any other flag is passed to Apache Beam, e.g. --runner DataflowRunner --project P --region R
--temp_location gs://B/tmp --sdk_container_image IMAGE (see deploy/dataflow/README.md).
Locally the default is the DirectRunner with 2 worker processes.
"""


def _prepare(args: argparse.Namespace, beam_args: list[str]) -> int:
    from realm.pipelines import prepare

    argv = ["--corpus", args.corpus, "--output", args.output]
    if args.input:
        argv += ["--input", args.input]
    if args.knowledge_blocks:
        argv += ["--knowledge_blocks", args.knowledge_blocks]
    if args.limit is not None:
        argv += ["--limit", str(args.limit)]
    prepare.run(argv + beam_args)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from realm.pipelines.readers import CORPORA

    parser = argparse.ArgumentParser(
        prog="realm", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    prepare = commands.add_parser(
        "prepare",
        help="build blocks, pre-training and ICT examples from a corpus (Beam)",
        description="Run the corpus-preparation Beam pipeline: read -> chunk -> salient -> trivial, and ict.",
        epilog=PREPARE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prepare.add_argument("--corpus", required=True, choices=CORPORA)
    prepare.add_argument("--input", help="path or glob of the corpus files (local or gs://)")
    prepare.add_argument("--output", required=True, help="run root the artifacts are written under")
    prepare.add_argument("--knowledge_blocks", help="blocks/ of another run to filter trivial retrievals against")
    prepare.add_argument("--limit", type=int, help="read at most this many vital articles (quick runs)")
    prepare.set_defaults(handler=_prepare)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return args.handler(args, extra)


if __name__ == "__main__":
    sys.exit(main())
