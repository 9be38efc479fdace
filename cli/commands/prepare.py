"""`realm prepare`: the corpus-preparation Beam pipeline, launched through its `run(argv)`.

    realm prepare --corpus vital --output runs/vital
    realm prepare --corpus wikiextractor --input 'extracted/*/wiki_*' --output runs/w --bert models/bert-base-uncased
    realm prepare --corpus wikipedia-xml --input 'gs://B/*.xml.bz2' --output gs://B/runs/w -- --runner DataflowRunner
"""

from __future__ import annotations

import argparse

EPILOG = """\
Corpora (--corpus):
  vital          the embedded default: ~10k Wikipedia vital-article summaries (no --input)
  wikipedia-xml  MediaWiki XML export dumps, *.xml or *.xml.bz2 (streamed)
  wikiextractor  WikiExtractor --json output (JSON lines id/url/title/text)
  ccnews-jsonl   CC-News JSON lines (news-please or HF cc_news fields)
  warc           WARC files of HTML pages (main text extracted with trafilatura)
  documents      Parquet or JSONL files with the documents/ schema

Apache Beam's flags (and the pipeline's own, e.g. --seed, --max_blocks_per_sentence) go after a
literal --, or inside --beam-args "...":
  realm prepare --corpus wikipedia-xml --input 'gs://B/*.xml.bz2' --output gs://B/runs/w -- \\
    --runner DataflowRunner --project P --region R --temp_location gs://B/tmp --sdk_container_image IMAGE
(see deploy/dataflow/README.md). Locally the default is the DirectRunner with 2 worker processes.
"""


def add_parser(commands) -> None:
    from realm.pipelines.corpus_names import CORPORA

    parser = commands.add_parser(
        "prepare", beam_flags=True,
        help="build blocks, pre-training and ICT examples from a corpus (Beam)",
        description="Run the corpus-preparation Beam pipeline: read -> chunk -> entities, salient -> trivial, and ict.",
        usage="realm prepare --corpus CORPUS [--input PATH] --output DIR [options] [-- BEAM_FLAGS...]",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--corpus", required=True, choices=CORPORA)
    parser.add_argument("--input", help="path or glob of the corpus files (local or gs://)")
    parser.add_argument("--output", required=True, help="run root the artifacts are written under")
    parser.add_argument("--knowledge-blocks", help="blocks/ of another run to filter trivial retrievals against")
    parser.add_argument("--limit", type=int, help="read at most this many vital articles (quick runs)")
    parser.add_argument("--bert", metavar="DIR", help="Hugging Face BERT directory whose vocabulary cuts the wordpieces "
                        "(the one the run trains with --bert; default: the model presets' MiniLM vocabulary)")
    parser.set_defaults(handler=handle)


def pipeline_argv(args: argparse.Namespace) -> list[str]:
    """The pipeline's argv: realm's flags in the pipeline's spelling, then Beam's as given."""
    argv = ["--corpus", args.corpus, "--output", args.output]
    if args.input:
        argv += ["--input", args.input]
    if args.knowledge_blocks:
        argv += ["--knowledge_blocks", args.knowledge_blocks]
    if args.limit is not None:
        argv += ["--limit", str(args.limit)]
    if args.bert:
        argv += ["--model_dir", _checked_bert(args.bert)]
    return argv + args.beam_args


def _checked_bert(path: str) -> str:
    from realm.model.networks.bert_dir import BertDirError, check_bert_dir

    try:
        return check_bert_dir(path)
    except BertDirError as error:
        raise SystemExit(f"realm prepare: --bert {error}") from None


def handle(args: argparse.Namespace) -> int:
    from realm.pipelines import prepare

    prepare.run(pipeline_argv(args))
    return 0
