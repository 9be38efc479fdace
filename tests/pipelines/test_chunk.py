import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from realm.model.tokenization import load_tokenizer
from realm.pipelines.chunk import (
    ChunkDocuments,
    DropDuplicateBlocks,
    load_sentencizer,
    sentence_spans,
    split_into_blocks,
)

SENTENCES = [
    f"Sentence number {i} mentions the city of Springfield and the year {1900 + i} in passing."
    for i in range(60)
]
LONG_TEXT = " ".join(SENTENCES[:30]) + "\n" + " ".join(SENTENCES[30:])


def document(doc_id, title, text):
    return {"doc_id": doc_id, "source": "test", "title": title, "text": text, "url": None, "date": None}


def test_every_sentence_lands_in_exactly_one_block_and_blocks_fit_the_budget():
    tokenizer, sentencizer = load_tokenizer(), load_sentencizer()
    blocks, cut = split_into_blocks("d1", "Springfield", LONG_TEXT, tokenizer, sentencizer)
    assert cut == 0
    assert len(blocks) > 1
    for block in blocks:
        assert block["num_tokens"] == 3 + len(block["title_token_ids"]) + len(block["body_token_ids"])
        assert block["num_tokens"] <= 288
        assert block["body_token_ids"] == tokenizer.encode(block["text"])
    found = [
        block["text"][start:end].strip()
        for block in blocks
        for start, end in zip(block["sentence_starts"], block["sentence_starts"][1:] + [len(block["text"])])
    ]
    assert found == SENTENCES
    assert [b["block_index"] for b in blocks] == list(range(len(blocks)))


def test_packing_is_greedy_each_block_is_full_up_to_the_next_sentence():
    tokenizer, sentencizer = load_tokenizer(), load_sentencizer()
    blocks, _ = split_into_blocks("d1", "Springfield", LONG_TEXT, tokenizer, sentencizer)
    budget = 288 - 3 - len(tokenizer.encode("Springfield"))
    for block, following in zip(blocks, blocks[1:]):
        next_sentence = following["text"][: (following["sentence_starts"] + [len(following["text"])])[1]].strip()
        assert len(block["body_token_ids"]) + len(tokenizer.encode(next_sentence)) > budget


def test_a_sentence_longer_than_a_block_is_cut_at_wordpieces_without_losing_text():
    tokenizer, sentencizer = load_tokenizer(), load_sentencizer()
    giant = " ".join(f"word{i}" for i in range(400)) + "."
    blocks, cut = split_into_blocks("d2", "T", giant, tokenizer, sentencizer, max_wordpieces=64)
    assert cut == 1
    assert all(b["num_tokens"] <= 64 for b in blocks)
    assert sum(len(b["body_token_ids"]) for b in blocks) == len(tokenizer.encode(giant))
    assert "".join(b["text"] for b in blocks).replace(" ", "") == giant.replace(" ", "")


def test_paragraph_breaks_end_sentences_even_without_punctuation():
    spans = sentence_spans("A heading\nThe body starts here. It goes on.", load_sentencizer())
    text = "A heading\nThe body starts here. It goes on."
    assert [text[s:e] for s, e in spans] == ["A heading", "The body starts here.", "It goes on."]


def test_chunk_transform_emits_blocks_dedupes_copies_and_dead_letters_empty_and_huge_documents():
    huge = "x " * 1_000_001
    with TestPipeline() as p:
        out = (
            p
            | "Docs" >> beam.Create(
                [
                    document("a", "Alpha", "Alpha is a letter. It comes first."),
                    document("a-copy", "Alpha", "Alpha is a letter. It comes first."),
                    document("empty", "Nothing", "   \n "),
                    document("zero-width", "Invisible", "\u200b\u200b\n\u00ad"),  # no wordpiece, though not blank
                    document("huge", "Huge", huge),
                ]
            )
            | ChunkDocuments()
        )
        assert_that(
            out["blocks"] | "Keys" >> beam.Map(lambda b: (b["doc_id"], b["text"], b["sentence_starts"])),
            equal_to([("a", "Alpha is a letter. It comes first.", [0, 19])]),
            label="blocks",
        )
        assert_that(
            out["dead_letter"] | "Reasons" >> beam.Map(lambda d: (d["stage"], d["record_key"], d["reason"])),
            equal_to([("chunk", "empty", "chunk_empty_body"), ("chunk", "zero-width", "chunk_empty_body"),
                      ("chunk", "huge", "chunk_document_too_long")]),
            label="dead_letter",
        )


def dropped_duplicates(result) -> int:
    result.wait_until_finish()
    counters = result.metrics().query(MetricsFilter().with_name("duplicate_blocks_dropped"))["counters"]
    return sum(c.committed for c in counters)


def block(block_id, doc_id, block_index):
    return {"block_id": block_id, "doc_id": doc_id, "block_index": block_index, "text": f"{doc_id}/{block_index}"}


def test_duplicate_blocks_keep_the_copy_with_the_smallest_doc_id_and_block_index_and_count_the_rest():
    pipeline = TestPipeline()
    kept = (
        pipeline
        | beam.Create([block(7, "b", 0), block(7, "a", 2), block(7, "a", 1), block(8, "c", 3), block(9, "b", 1),
                       block(9, "a", 0)])
        | DropDuplicateBlocks()
    )
    assert_that(
        kept | beam.Map(lambda b: (b["block_id"], b["doc_id"], b["block_index"], b["text"])),
        equal_to([(7, "a", 1, "a/1"), (8, "c", 3, "c/3"), (9, "a", 0, "a/0")]),
    )
    assert dropped_duplicates(pipeline.run()) == 3


def test_a_corpus_without_duplicates_keeps_every_block_and_reports_none_dropped():
    pipeline = TestPipeline()
    kept = pipeline | beam.Create([block(1, "a", 0), block(2, "a", 1)]) | DropDuplicateBlocks()
    assert_that(kept | beam.Map(lambda b: b["block_id"]), equal_to([1, 2]))
    result = pipeline.run()
    result.wait_until_finish()
    names = {c.key.metric.name for c in result.metrics().query()["counters"]}
    assert "duplicate_blocks_dropped" in names
    assert dropped_duplicates(result) == 0
