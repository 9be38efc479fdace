"""A SQuAD v1.1 file built in code, and its paragraphs cut into passages as the warm-up cuts them."""

import json

import pyarrow as pa

from realm.model.training.squad_passages import passage_documents
from realm.pipelines.chunk import load_sentencizer, split_into_blocks
from realm.pipelines.entities import tag_blocks
from realm.pipelines.ner import load_ner
from realm.schemas import BLOCK_ENTITIES, BLOCKS
from tests.model.corpus_fixture import write_corpus

# (title, [(paragraph, [(question id, question, [answers, each at its first occurrence in the paragraph])])])
ARTICLES = [
    ("Eiffel_Tower", [(
        "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris. It was designed "
        "and built by the company of Gustave Eiffel. It was completed in 1889 as the entrance arch to the "
        "World's Fair.",
        [
            ("e1", "Whose company built the Eiffel Tower?", ["Gustave Eiffel", "Gustave Eiffel", "company of Gustave Eiffel"]),
            ("e2", "In what year was the Eiffel Tower completed?", ["1889"]),
            ("e3", "Where in Paris is the Eiffel Tower?", ["the Champ de Mars"]),
        ],
    )]),
    ("Ada_Lovelace", [(
        "Ada Lovelace was an English mathematician. She wrote the first algorithm for Charles Babbage's "
        "Analytical Engine.",
        [
            ("a1", "Who designed the Analytical Engine?", ["Charles Babbage"]),
            # No answer the reader can select: it cuts "mathematician" and runs past the widest span.
            ("a2", "What did Ada Lovelace do?", ["mathematic", "wrote the first algorithm for Charles Babbage's Analytical Engine"]),
        ],
    )]),
]
# A budget that cuts the Eiffel Tower paragraph into two blocks: its answers are in both.
PASSAGE_WORDPIECES = 40


def squad_json(articles=ARTICLES) -> dict:
    """SQuAD's own JSON of `articles`, each answer's offset its text's first in the paragraph."""
    return {"version": "1.1", "data": [
        {"title": title, "paragraphs": [
            {"context": context, "qas": [
                {"id": qid, "question": question,
                 "answers": [{"answer_start": context.index(answer), "text": answer} for answer in answers]}
                for qid, question, answers in qas
            ]}
            for context, qas in paragraphs
        ]}
        for title, paragraphs in articles
    ]}


def write_squad(path, records=None) -> str:
    path.write_text(json.dumps(records or squad_json()), encoding="utf-8")
    return str(path)


def cut_passages(questions, blocks_path: str, tokenizer, max_wordpieces: int = PASSAGE_WORDPIECES) -> str:
    """The questions' paragraphs cut and tagged as the warm-up's Beam stages cut and tag them
    (`realm.pipelines.chunk`, `realm.pipelines.entities`), written as blocks/ and block_entities/."""
    sentencizer = load_sentencizer()
    rows = [
        block
        for document in passage_documents(questions)
        for block in split_into_blocks(document["doc_id"], document["title"], document["text"], tokenizer, sentencizer,
                                       max_wordpieces)[0]
    ]
    blocks = pa.Table.from_pylist(rows, schema=BLOCKS)
    entities = pa.Table.from_pylist(list(tag_blocks(load_ner(), rows)), schema=BLOCK_ENTITIES)
    return write_corpus(blocks_path, blocks, entities)
