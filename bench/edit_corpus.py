"""REALM's knowledge lives in the corpus: edit facts, re-index without training, and see
whether the answers follow (Guu et al. 2020, §4.4; `realm index`).

    python bench/edit_corpus.py --run runs/main [--qa FILE ...] [--name edit-demo] [--max_blocks 3]

1. The trained run answers the questions (default: the demo set and the held-out tenths,
   never trained on) from its own corpus; the questions it answers right are the facts it
   demonstrably reads.
2. For each such fact whose answer string occurs in at most `--max_blocks` blocks, every
   occurrence in those blocks is replaced by a substitute of the same kind: every number in
   it moved by +3 ("1969" -> "1972", "44 BC" -> "47 BC"), any other answer by another right
   answer with the same salient-span label (PERSON for PERSON, GPE for GPE: the labels
   `realm prepare`'s spaCy pass gave those strings in the corpus); answers with no label are
   left alone. Blocks already edited for another fact are left alone.
3. The original corpus and then the edited one are indexed under `--name` with the run's
   trained doc tower (the second index re-embeds only the edited blocks; spaCy tags the
   edited blocks' entities, the others keep the run's), and the questions are asked again.
Each edited fact's new answer is counted as following the edit (the substitute), the old
answer (memorised in the reader or found in a block the edit missed), or something else.
Ends with one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import tempfile
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from realm.flows.demo import evaluation_qa_paths
from realm.model.qa.answer_metrics import exact_match, normalize_answer
from realm.model.qa.answering import Answerer
from realm.model.qa.other_corpus import index_other_corpus
from realm.model.qa.qa_data import read_qa_file
from realm.pipelines.chunk import block_id_for
from realm.pipelines.entities import tag_blocks
from realm.pipelines.ner import load_ner
from realm.schemas import BLOCK_ENTITIES, BLOCKS, PRETRAIN_EXAMPLES, read_table, write_table
from realm.schemas.run_layout import RunLayout

log = logging.getLogger(__name__)
_NUMBER = re.compile(r"\d+")


def span_labels(pretrain_examples: str) -> dict[str, str]:
    """Normalised salient-span text -> its most frequent label in the corpus."""
    table = read_table(pretrain_examples, PRETRAIN_EXAMPLES, columns=["text", "spans"])
    counts: dict[str, Counter] = {}
    for text, spans in zip(table["text"].to_pylist(), table["spans"].to_pylist()):
        for span in spans:
            counts.setdefault(normalize_answer(text[span["start"] : span["end"]]), Counter())[span["label"]] += 1
    return {key: counter.most_common(1)[0][0] for key, counter in counts.items()}


def substitute_for(answer: str, labels: dict[str, str], others: list[str]) -> str | None:
    """A different answer of the same kind (see the module docstring), or None."""
    if _NUMBER.search(answer):
        return _NUMBER.sub(lambda number: str(int(number.group()) + 3), answer)
    label = labels.get(normalize_answer(answer))
    for other in others:
        if label and labels.get(normalize_answer(other)) == label and normalize_answer(other) != normalize_answer(answer):
            return other
    return None


def _occurrences(answer: str) -> re.Pattern:
    return re.compile(rf"(?<!\w){re.escape(answer)}(?!\w)")


def edit_blocks(blocks: pa.Table, facts: list[dict], tokenizer, max_blocks: int) -> tuple[pa.Table, list[dict]]:
    """`blocks` with each fact's answer replaced by its substitute in every block holding it
    (facts in more than `max_blocks` blocks, or in a block already edited, are skipped); the
    edited blocks are re-tokenized and get their new content-hash ids, as chunking would give."""
    rows = blocks.to_pylist()
    edited_rows: set[int] = set()
    applied = []
    for fact in facts:
        pattern = _occurrences(fact["answer"])
        holding = [i for i, row in enumerate(rows) if pattern.search(row["text"])]
        if not holding or len(holding) > max_blocks or edited_rows & set(holding):
            log.info("not edited (%d blocks, %s already edited): %s", len(holding), len(edited_rows & set(holding)), fact)
            continue
        for i in holding:
            row = rows[i]
            text = pattern.sub(fact["substitute"], row["text"])
            body_ids = tokenizer.encode(text)
            starts = [len(pattern.sub(fact["substitute"], row["text"][:s])) for s in row["sentence_starts"]]
            row.update(
                text=text, body_token_ids=body_ids, sentence_starts=starts, block_id=block_id_for(row["title"], text),
                num_tokens=3 + len(row["title_token_ids"]) + len(body_ids),
            )
        edited_rows |= set(holding)
        applied.append({**fact, "blocks": len(holding)})
    return pa.Table.from_pylist(rows, schema=BLOCKS), applied


def entities_of(blocks: pa.Table, tagged: pa.Table) -> pa.Table:
    """BLOCK_ENTITIES rows of `blocks`: those `tagged` already holds, and spaCy's for the rest."""
    kept = tagged.filter(pc.is_in(tagged["block_id"], blocks["block_id"]))
    new = blocks.filter(pc.invert(pc.is_in(blocks["block_id"], kept["block_id"])))
    rows = list(tag_blocks(load_ner(), new.select(["block_id", "text"]).to_pylist())) if new.num_rows else []
    return pa.concat_tables([kept, pa.Table.from_pylist(rows, schema=BLOCK_ENTITIES)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="a trained run root")
    parser.add_argument("--qa", nargs="+", default=evaluation_qa_paths())
    parser.add_argument("--name", default="edit-demo", help="the corpus name the edited corpus is indexed under")
    parser.add_argument("--max_blocks", type=int, default=3, help="edit only facts found in at most this many blocks")
    parser.add_argument("--max_block_wordpieces", type=int, help="for a run whose index predates lineage")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    examples = [e for path in args.qa for e in read_qa_file(path) if e.answer_type == "text"]
    answerer = Answerer.from_run(args.run)
    before = answerer.answer([e.question for e in examples], num_read=5, num_retrieve=5)
    right = [(e, p) for e, p in zip(examples, before) if exact_match(p.answer, e.answers)]
    labels = span_labels(RunLayout.at(args.run).pretrain_examples)
    others = [p.answer for _, p in right]
    facts = []
    for example, prediction in right:
        substitute = substitute_for(prediction.answer, labels, others)
        if substitute is not None:
            facts.append({"question": example.question, "answer": prediction.answer, "substitute": substitute})

    layout = RunLayout.at(args.run)
    blocks, entities = read_table(layout.blocks, BLOCKS), read_table(layout.block_entities, BLOCK_ENTITIES)
    edited, applied = edit_blocks(blocks, facts, answerer.tokenizer, args.max_blocks)
    with tempfile.TemporaryDirectory() as tmp:
        for corpus, table in (("original", blocks), ("edited", edited)):
            write_table(str(Path(tmp) / corpus / "blocks" / "part-0.parquet"), table, BLOCKS)
            write_table(str(Path(tmp) / corpus / "block_entities" / "part-0.parquet"), entities_of(table, entities),
                        BLOCK_ENTITIES)
        first = index_other_corpus(args.run, Path(tmp) / "original", args.name, args.max_block_wordpieces)
        update = index_other_corpus(args.run, Path(tmp) / "edited", args.name, args.max_block_wordpieces)

    after = Answerer.from_run(args.run, corpus=args.name).answer([f["question"] for f in applied], num_read=5, num_retrieve=5)
    counts = {"follows the edit": 0, "old answer": 0, "other": 0}
    print(f"{'question':<60} {'old':<22} {'edited to':<22} {'answer now':<22} outcome")
    for fact, prediction in zip(applied, after):
        if exact_match(prediction.answer, [fact["substitute"]]):
            outcome = "follows the edit"
        elif exact_match(prediction.answer, [fact["answer"]]):
            outcome = "old answer"
        else:
            outcome = "other"
        counts[outcome] += 1
        print(f"{fact['question'][:59]:<60} {fact['answer'][:21]:<22} {fact['substitute'][:21]:<22} "
              f"{prediction.answer[:21]:<22} {outcome}")
    n = max(len(applied), 1)
    print(f"\n{len(examples)} questions, {len(right)} answered right before the edit ({len(facts)} with a substitute of "
          f"the same kind), {len(applied)} facts edited in {sum(f['blocks'] for f in applied)} blocks")
    print(f"re-index: version {update.version}, {update.embedded} blocks embedded, {update.reused} unchanged, "
          f"{update.dropped} dropped, {update.seconds:.0f} s (the first, full index: {first.embedded} blocks, {first.seconds:.0f} s)")
    for outcome, count in counts.items():
        print(f"{outcome:<17} {count:>3}  {count / n:.2f}")
    print(json.dumps({
        "questions": len(examples), "right_before": len(right), "with_substitute": len(facts), "facts_edited": len(applied),
        "blocks_edited": sum(f["blocks"] for f in applied), "reindex_embedded": update.embedded,
        "reindex_seconds": round(update.seconds, 1), "full_index_seconds": round(first.seconds, 1),
        **{outcome.replace(" ", "_"): count for outcome, count in counts.items()},
    }))


if __name__ == "__main__":
    main()
