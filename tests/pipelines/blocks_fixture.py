"""Small BLOCKS records built in code for the stage tests."""

from realm.model.tokenization import load_tokenizer
from realm.pipelines.chunk import block_id_for


def make_block(title: str, sentences: list[str], doc_id: str | None = None) -> dict:
    tokenizer = load_tokenizer()
    text = " ".join(sentences)
    starts, cursor = [], 0
    for sentence in sentences:
        starts.append(cursor)
        cursor += len(sentence) + 1
    title_ids, body_ids = tokenizer.encode(title), tokenizer.encode(text)
    return {
        "block_id": block_id_for(title, text),
        "doc_id": doc_id or f"test:{title}",
        "block_index": 0,
        "title": title,
        "text": text,
        "sentence_starts": starts,
        "title_token_ids": title_ids,
        "body_token_ids": body_ids,
        "num_tokens": 3 + len(title_ids) + len(body_ids),
    }
