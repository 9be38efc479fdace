"""Answering a question from a trained run, as `realm ask`, `realm run`'s closing answer and
`realm serve` (POST /ask) do it, with the same defaults everywhere."""

from __future__ import annotations

from realm.model.qa.risk_coverage import MIN_CONFIDENCE, answered

# Blocks the reader reads, and retrieved blocks shown as evidence, unless a question asks for
# others: the evidence shown is the blocks the answer was read from.
NUM_READ = 5
EVIDENCE_BLOCKS = 5


def run_answerer(run_root: str, device: str | None, corpus: str | None = None, bf16_reader: bool = False):
    """The Answerer of a trained run (`Answerer.from_run`), over `corpus` when given."""
    from realm.model.networks.config import set_transformers_verbosity_error
    from realm.model.networks.device import select_device
    from realm.model.qa.answering import Answerer
    from realm.schemas import ArtifactError

    set_transformers_verbosity_error()
    try:
        return Answerer.from_run(run_root, device=select_device(device), corpus=corpus, bf16_reader=bf16_reader)
    except ArtifactError:
        raise  # main's one line for a damaged file
    except ValueError as error:  # e.g. a corpus name that is not a plain name
        raise SystemExit(f"realm: {error}") from None


def print_answer(
    answerer, question: str, num_read: int = NUM_READ, evidence: int = EVIDENCE_BLOCKS,
    min_confidence: float = MIN_CONFIDENCE,
) -> None:
    """The answer and its probability (or no answer, below `min_confidence`), then the evidence."""
    if why := answerer.why_unreadable(question):
        raise SystemExit(f"realm ask: {why}")
    (prediction,) = answerer.answer([question], num_read=num_read, num_retrieve=max(num_read, evidence))
    given = answered(prediction.probability, min_confidence)
    if given:
        print(f"answer: {prediction.answer}  (p = {prediction.probability:.3f})")
    else:
        print(f"no answer: p = {prediction.probability:.3f} is below --min-confidence {min_confidence:g}")
    print("evidence:")
    for rank, block in enumerate(prediction.evidence[:evidence], start=1):
        excerpt = " ".join(block.text.split())[:200]
        read_from = "  <- the answer" if given and block.block_id == prediction.block_id else ""
        print(f"  {rank}. [{block.probability:.3f}] {block.title}: {excerpt}{read_from}")
