"""The Beam pipeline options of every realm pipeline, in one `PipelineOptions` subclass.

Beam registers every direct `PipelineOptions` subclass in one argument parser, so stage
modules share this class instead of each declaring a clashing `--output`. Defaults run on a
2-core laptop; each stage's `run` checks the flags it needs.
"""

from __future__ import annotations

from apache_beam.options.pipeline_options import PipelineOptions

from realm.model.tokenization import MAX_BLOCK_WORDPIECES

DEFAULT_MAX_BLOCKS_PER_SENTENCE = 20
# ORQA keeps the query sentence in its context 10% of the time.
DEFAULT_ICT_KEEP_PROBABILITY = 0.1


class RealmOptions(PipelineOptions):
    @classmethod
    def _add_argparse_args(cls, parser):
        group = parser.add_argument_group("realm")
        group.add_argument("--output", help="run root (local path or gs://...) the artifacts are written under")
        group.add_argument("--corpus", help="corpus format for `prepare` (see `realm prepare --help`)")
        group.add_argument("--input", help="input path or glob for `prepare` (not needed for --corpus vital)")
        group.add_argument("--limit", type=int, default=None, help="read at most this many vital articles")
        group.add_argument("--documents", help="documents/ artifact for the chunk stage")
        group.add_argument("--blocks", help="blocks/ artifact for the salient and ict stages")
        group.add_argument("--pretrain_examples", help="pretrain_examples/ artifact for the trivial stage")
        group.add_argument(
            "--knowledge_blocks",
            help="blocks/ of the knowledge corpus Z for trivial-retrieval filtering "
            "(default: the blocks built in this run, i.e. X = Z)",
        )
        group.add_argument(
            "--model_dir", default=None, help="local HF BERT dir for the WordPiece vocabulary (default: MiniLM)"
        )
        group.add_argument("--seed", type=int, default=0, help="seeds span choice and ICT sampling")
        group.add_argument("--max_block_wordpieces", type=int, default=MAX_BLOCK_WORDPIECES)
        group.add_argument(
            "--max_blocks_per_sentence", type=int, default=DEFAULT_MAX_BLOCKS_PER_SENTENCE,
            help="a sentence in more blocks than this is boilerplate: its examples are dropped",
        )
        group.add_argument("--ict_keep_probability", type=float, default=DEFAULT_ICT_KEEP_PROBABILITY)
        group.add_argument("--ict_queries_per_block", type=int, default=1)
        group.add_argument("--run", help="run root whose blocks/ `embed` embeds with one of its doc-tower snapshots")
        group.add_argument("--step", type=int, default=None, help="the snapshot `embed` uses (default: the newest)")
        # The embedding's defaults are the in-process embedder's (realm.model.index), which
        # `embed` reads: preparation, keyed on what these options import, does not depend on them.
        group.add_argument(
            "--embed_batch_blocks", type=int, default=None, help="blocks per doc-tower forward (default: the refresh's)"
        )
        group.add_argument(
            "--embed_window_blocks", type=int, default=None,
            help="blocks per RunInference call, sorted by length within (default: the refresh's window)",
        )


def require(options: RealmOptions, *names: str) -> None:
    missing = [f"--{name}" for name in names if getattr(options, name) in (None, "")]
    if missing:
        raise SystemExit(f"missing required flag(s): {', '.join(missing)}")
