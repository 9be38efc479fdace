"""The corpora `realm prepare` reads, by name: what the CLI offers without importing Beam
(whose import logs warnings before every `realm ask` answer otherwise)."""

CORPORA = ("vital", "wikipedia-xml", "wikiextractor", "ccnews-jsonl", "warc", "documents")
