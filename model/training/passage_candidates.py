"""Reading-comprehension candidates: a question read over its own passage and the blocks the index retrieves.

A reading-comprehension question (SQuAD's) comes with the paragraph that answers it. Its
passage is that paragraph cut into a block as the corpus's blocks are cut, held in a
`blocks/` artifact of its own (`Passages.blocks_path`, with its `block_entities/` beside it)
and in no index. `PassageRetriever` gives each question its passage first, then the top blocks
the run's index retrieves for it (as fine-tuning's reader reads them), with p(z|x) uniform over
them: the query tower has no vector of the passage to score it against, so the reader alone
learns to choose, and the tower is left as it is. The gold spans are the answers marked in the
passage (`Passage.spans`) and, in a retrieved block, wherever an answer's text occurs, as
fine-tuning finds them (`realm.model.training.question_candidates`): a corpus block holding
the paragraph's text, cut otherwise, is a gold block, not a negative; those without are the
negatives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from realm.model.networks.marginal import mask_log_scores
from realm.model.qa.question_retrieval import QuestionRetriever, Retrieved
from realm.model.training.stage_inputs import json_digest


@dataclass(frozen=True)
class Passage:
    block_id: int
    spans: tuple[tuple[int, int], ...]  # body-relative (start, end), end inclusive: the marked answers


@dataclass(frozen=True)
class Passages:
    """Each question's passage (by question text) and the `blocks/` artifact holding them."""

    blocks_path: str
    by_question: Mapping[str, Passage]

    def digest(self) -> str:
        """What a stage trained on them keys its checkpoints on, besides the artifact's content."""
        return json_digest(sorted([q, p.block_id, [list(s) for s in p.spans]] for q, p in self.by_question.items()))


class PassageRetriever:
    """A question's passage, then the top blocks `retriever` returns for it other than the
    passage; uniform logits, nothing to train (module docstring). Knows only the questions of
    `passages`."""

    def __init__(self, retriever: QuestionRetriever, passages: Mapping[str, Passage]):
        self.retriever, self.passages = retriever, passages
        self.index, self.device = retriever.index, retriever.device
        for module in retriever.trainable_modules():  # frozen: the same negatives at every validation, no dropout draw
            module.eval()

    def trainable_modules(self) -> list[torch.nn.Module]:
        return []

    @torch.no_grad()
    def retrieve(self, questions: Sequence[str], question_ids: Sequence[Sequence[int]], k: int) -> Retrieved:
        passage_ids = [self._passage(question).block_id for question in questions]
        block_ids = np.full((len(questions), k), -1, dtype=np.int64)  # [n, k]
        found = np.zeros((len(questions), k), dtype=bool)  # [n, k]
        block_ids[:, 0], found[:, 0] = passage_ids, True
        if k > 1:
            # k, not k - 1: one spare for a passage the index holds too (a corpus block with its title and text).
            hits = self.retriever.retrieve(questions, question_ids, k)
            for row, passage_id in enumerate(passage_ids):
                others = [c for c in range(k) if hits.found[row, c] and hits.block_ids[row, c] != passage_id][: k - 1]
                block_ids[row, 1 : 1 + len(others)] = hits.block_ids[row, others]
                found[row, 1 : 1 + len(others)] = True
        return Retrieved(block_ids, found, self.score(question_ids, block_ids, found))

    def score(self, question_ids: Sequence[Sequence[int]], block_ids: np.ndarray, found: np.ndarray) -> torch.Tensor:
        return mask_log_scores(torch.zeros(found.shape), torch.from_numpy(found)).to(self.device)

    def _passage(self, question: str) -> Passage:
        if question not in self.passages:
            raise KeyError(f"no passage for the question {question!r}")
        return self.passages[question]
