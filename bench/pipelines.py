"""Corpus-pipeline throughput on the vital corpus, measured side by side in one run.

    python bench/pipelines.py [--docs N] [--workers 2] [--shards 8]

1. chunk: `ReadArtifact(documents) | ChunkDocuments` on Beam's DirectRunner with N worker
   processes vs a bare single-process loop of the same `split_into_blocks` (same tokenizer,
   same sentencizer) over the same documents.
2. tag: `ReadArtifact(blocks) | TagSalientSpans` vs a bare single-process `nlp.pipe` loop
   with the same spaCy components (ner only) over the same sentences. The pipeline also
   tokenizes, runs the date regexes and builds the example records; the bare loop only runs NER.
Inputs are written once as Parquet shards (as a previous stage leaves them), so both sides
start from data on disk. Pipeline times are wall clock for the whole `pipeline.run()`,
worker start-up and model loading included. Targets: tagging >= 1.5x, chunking >= 1.0x.
Ends with one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from realm.model.tokenization import load_tokenizer
from realm.pipelines.artifacts import ReadArtifact
from realm.pipelines.chunk import ChunkDocuments, load_sentencizer, split_into_blocks
from realm.pipelines.execution import LOCAL_RUNNER_FLAGS, stage_counters
from realm.pipelines.ner import load_ner
from realm.pipelines.read_vital import load_vital_summaries, vital_summary_to_document
from realm.pipelines.salient import TagSalientSpans
from realm.pipelines.sentences import block_sentences
from realm.schemas import BLOCKS, DOCUMENTS, write_table


def write_shards(rows: list[dict], directory: Path, schema, shards: int) -> str:
    for shard in range(shards):
        write_table(str(directory / f"part-{shard:05d}.parquet"), rows[shard::shards], schema)
    return str(directory)


def run_beam(build, workers: int) -> tuple[float, dict]:
    flags = [f if not f.startswith("--direct_num_workers") else f"--direct_num_workers={workers}" for f in LOCAL_RUNNER_FLAGS]
    pipeline = beam.Pipeline(options=PipelineOptions(flags))
    build(pipeline)
    start = time.perf_counter()
    result = pipeline.run()
    result.wait_until_finish()
    return time.perf_counter() - start, stage_counters(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=None, help="first N vital articles (default: all)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--shards", type=int, default=8, help="Parquet files the inputs are split into")
    args = parser.parse_args()
    logging.getLogger("apache_beam").setLevel(logging.ERROR)

    summaries = load_vital_summaries()
    documents = [vital_summary_to_document(summaries[t]) for t in sorted(summaries)[: args.docs]]
    print(f"vital corpus: {len(documents)} documents; Beam DirectRunner with {args.workers} worker processes")
    scratch = Path(tempfile.mkdtemp(prefix="realm-bench-"))
    documents_dir = write_shards(documents, scratch / "documents", DOCUMENTS, args.shards)

    tokenizer, sentencizer = load_tokenizer(), load_sentencizer()
    start = time.perf_counter()
    blocks = [b for d in documents for b in split_into_blocks(d["doc_id"], d["title"], d["text"], tokenizer, sentencizer)[0]]
    bare_chunk_s = time.perf_counter() - start
    beam_chunk_s, chunk_counts = run_beam(
        lambda p: p | ReadArtifact(documents_dir, DOCUMENTS) | ChunkDocuments(), args.workers
    )
    assert chunk_counts["chunk"]["documents"] == len(documents), chunk_counts
    chunk_ratio = bare_chunk_s / beam_chunk_s
    print(f"chunk  bare loop    {len(documents) / bare_chunk_s:8.1f} docs/s | beam {len(documents) / beam_chunk_s:8.1f} docs/s"
          f" | ratio {chunk_ratio:.2f}x ({len(blocks)} blocks)")

    blocks_dir = write_shards(blocks, scratch / "blocks", BLOCKS, args.shards)
    sentences = [text for block in blocks for _, text in block_sentences(block) if text]
    nlp = load_ner()
    start = time.perf_counter()
    entities = sum(len(doc.ents) for doc in nlp.pipe(sentences, batch_size=256))
    bare_tag_s = time.perf_counter() - start
    beam_tag_s, tag_counts = run_beam(lambda p: p | ReadArtifact(blocks_dir, BLOCKS) | TagSalientSpans(), args.workers)
    assert tag_counts["salient"]["sentences"] == len(sentences), tag_counts
    tag_ratio = bare_tag_s / beam_tag_s
    print(f"tag    bare nlp.pipe {len(sentences) / bare_tag_s:8.1f} sent/s | beam {len(sentences) / beam_tag_s:8.1f} sent/s"
          f" | ratio {tag_ratio:.2f}x ({entities} entities)")

    print(json.dumps({
        "documents": len(documents), "blocks": len(blocks), "sentences": len(sentences), "workers": args.workers,
        "chunk_docs_per_s_bare": round(len(documents) / bare_chunk_s, 1),
        "chunk_docs_per_s_beam": round(len(documents) / beam_chunk_s, 1),
        "chunk_ratio": round(chunk_ratio, 2),
        "tag_sentences_per_s_bare": round(len(sentences) / bare_tag_s, 1),
        "tag_sentences_per_s_beam": round(len(sentences) / beam_tag_s, 1),
        "tag_ratio": round(tag_ratio, 2),
    }))


if __name__ == "__main__":
    main()
