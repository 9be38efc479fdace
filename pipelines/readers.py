"""The corpus readers by name, as the CLI and `prepare` choose them with `--corpus` and `--input`.

Every reader returns `{"documents": ..., "dead_letter": ...}`. "vital" is the embedded default
corpus and takes no input; every other corpus reads the files matching `--input`, a path or
glob that may be a `gs://` URL (`dumps/*.xml.bz2`, `extracted/**`, `crawl/*.warc.gz`).
A document id names one document: documents read under an id already taken (a page crawled
twice, a dump listed twice, two files of one corpus) keep one copy and dead-letter the rest.
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam

from realm.pipelines.corpus_files import STAGE
from realm.pipelines.corpus_names import CORPORA
from realm.pipelines.dead_letters import DEAD_LETTER, reject
from realm.pipelines.read_ccnews import ReadCcNewsJsonl, ReadWarc
from realm.pipelines.read_documents import ReadDocuments
from realm.pipelines.read_vital import ReadVitalArticles
from realm.pipelines.read_wikiextractor import ReadWikiExtractor
from realm.pipelines.read_wikipedia_xml import ReadWikipediaXml

_FILE_READERS = {
    "wikipedia-xml": ReadWikipediaXml,
    "wikiextractor": ReadWikiExtractor,
    "ccnews-jsonl": ReadCcNewsJsonl,
    "warc": ReadWarc,
    "documents": ReadDocuments,
}
if set(CORPORA) != {"vital", *_FILE_READERS}:  # a reader added without its name, or a name without its reader
    raise ImportError(f"realm.pipelines.corpus_names.CORPORA {CORPORA} does not name the readers {sorted(_FILE_READERS)}")


def one_per_doc_id(doc_id: str, copies: list[dict]) -> Iterator:
    """The copy of `doc_id` that sorts first by content (so every run keeps the same one),
    then a `read_duplicate_doc_id` dead letter for each other copy."""
    copies = sorted(copies, key=lambda d: (d["title"], d["text"], d["url"] or "", d["date"] or "", d["source"]))
    yield copies[0]
    for repeat in copies[1:]:
        detail = f"{len(copies)} documents have this id; kept the first by title and text"
        yield reject(STAGE, doc_id, "duplicate_doc_id", detail, f"{repeat['title']}\n{repeat['text']}")


class DropDuplicateDocIds(beam.PTransform):
    """documents -> {"documents": one per doc_id, "dead_letter": the repeats}."""

    def expand(self, documents):
        # (doc_id, [document, ...]) after the group; a shuffle of every document, which a
        # corpus can afford once (chunking shuffles only block ids to drop duplicate blocks).
        outputs = (
            documents
            | "KeyByDocId" >> beam.Map(lambda document: (document["doc_id"], document))
            | "GroupByDocId" >> beam.GroupByKey()
            | "KeepOne" >> beam.FlatMapTuple(one_per_doc_id).with_outputs(DEAD_LETTER, main="documents")
        )
        return {"documents": outputs.documents, "dead_letter": outputs[DEAD_LETTER]}


class ReadUniqueDocuments(beam.PTransform):
    """A corpus reader, then `DropDuplicateDocIds`; both dead-letter outputs as one."""

    def __init__(self, reader: beam.PTransform):
        super().__init__()
        self.reader = reader

    def expand(self, pbegin):
        read = pbegin | "Read" >> self.reader
        unique = read["documents"] | DropDuplicateDocIds()
        dead_letter = (read["dead_letter"], unique["dead_letter"]) | "DeadLetters" >> beam.Flatten()
        return {"documents": unique["documents"], "dead_letter": dead_letter}


def read_corpus(pipeline_root, corpus: str, input_pattern: str | None, limit: int | None = None) -> dict:
    """Apply the reader of `corpus`, one document per id, to the pipeline root, labelled `Read<Corpus>`."""
    label = "Read" + "".join(part.capitalize() for part in corpus.split("-"))
    if corpus == "vital":
        if input_pattern:
            raise ValueError(f"corpus 'vital' is embedded and reads no input, got input {input_pattern!r}")
        reader = ReadVitalArticles(limit)
    else:
        if corpus not in _FILE_READERS:
            raise ValueError(f"unknown corpus {corpus!r}; choose one of {', '.join(CORPORA)}")
        if not input_pattern:
            raise ValueError(f"corpus {corpus!r} needs an input path or glob (--input)")
        if limit is not None:
            raise ValueError(f"limit applies to the vital corpus only, not to {corpus!r}")
        reader = _FILE_READERS[corpus](input_pattern)
    return pipeline_root | label >> ReadUniqueDocuments(reader)
