"""The corpus readers by name, as the CLI and `prepare` choose them with `--corpus` and `--input`.

Every reader returns `{"documents": ..., "dead_letter": ...}`. "vital" is the embedded default
corpus and takes no input; every other corpus reads the files matching `--input`, a path or
glob that may be a `gs://` URL (`dumps/*.xml.bz2`, `extracted/**`, `crawl/*.warc.gz`).
"""

from __future__ import annotations

from realm.pipelines.corpus_names import CORPORA
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


def read_corpus(pipeline_root, corpus: str, input_pattern: str | None, limit: int | None = None) -> dict:
    """Apply the reader of `corpus` to the pipeline root, labelled `Read<Corpus>`."""
    label = "Read" + "".join(part.capitalize() for part in corpus.split("-"))
    if corpus == "vital":
        if input_pattern:
            raise ValueError(f"corpus 'vital' is embedded and reads no input, got input {input_pattern!r}")
        return pipeline_root | label >> ReadVitalArticles(limit)
    if corpus not in _FILE_READERS:
        raise ValueError(f"unknown corpus {corpus!r}; choose one of {', '.join(CORPORA)}")
    if not input_pattern:
        raise ValueError(f"corpus {corpus!r} needs an input path or glob (--input)")
    if limit is not None:
        raise ValueError(f"limit applies to the vital corpus only, not to {corpus!r}")
    return pipeline_root | label >> _FILE_READERS[corpus](input_pattern)
