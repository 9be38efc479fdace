"""The Open-QA reader: BERT over `join(q, z_body)`, span score MLP([h_start; h_end]) (REALM §3.2, ORQA).

Candidate spans are every span of at most 10 wordpieces inside the block body; the
question and the special tokens are never an answer. p(y|z,x) sums the span softmax (over
one block's spans) over the spans whose wordpieces match an answer, so
log p(y|z,x) = logsumexp over gold spans of the span log-softmax; `marginal_log_likelihood`
then marginalises it over the retrieved blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from transformers import BertConfig, BertModel, BertPreTrainedModel

from realm.model.answer_metrics import normalize_answer
from realm.model.config import ModelConfig, build_component
from realm.model.inputs import BertInputs, joint_sequence, pad_batch
from realm.model.marginal import as_float32_or_wider, mask_log_scores, masked_logsumexp
from realm.model.tokenization import WordPieceTokenizer


def find_gold_spans(
    tokenizer: WordPieceTokenizer,
    body_ids: Sequence[int],
    answers: Sequence[str],
    max_span_wordpieces: int = 10,
) -> list[tuple[int, int]]:
    """(start, end) body-relative, end inclusive, of every body span whose wordpieces equal an
    answer's (as given, or after `normalize_answer`, which drops articles and punctuation).

    The uncased WordPiece tokenizer already lowercases and strips accents. A span must cover
    whole words: it may not start or end inside a word (a `##` piece at its start or right
    after its end), so "art" never matches inside "artist".
    """
    body_ids = list(body_ids)
    continues_word = [t.startswith("##") for t in tokenizer.convert_ids_to_tokens(body_ids)] + [False]
    spans = set()
    for answer in answers:
        for variant in {answer, normalize_answer(answer)}:
            answer_ids = tokenizer.encode(variant)
            width = len(answer_ids)
            if not 0 < width <= max_span_wordpieces:
                continue
            for start in range(len(body_ids) - width + 1):
                if (
                    body_ids[start : start + width] == answer_ids
                    and not continues_word[start]
                    and not continues_word[start + width]
                ):
                    spans.add((start, start + width - 1))
    return sorted(spans)


@dataclass(frozen=True)
class SpanTable:
    """Every candidate span of a batch of joint sequences, flattened per sequence.

    Span index = offset · max_span + (width − 1), offset being the start's position within
    the body, so body-relative (start, end) and span index convert without a search.
    """

    starts: torch.Tensor  # [n, spans] absolute position of the first wordpiece in the joint input
    ends: torch.Tensor  # [n, spans] absolute position of the last wordpiece (inclusive)
    valid: torch.Tensor  # [n, spans] False where the span runs past the body's end
    max_span: int

    def to(self, device: torch.device) -> SpanTable:
        """On the device of the reader's hidden states, which `Reader.span_logits` gathers from."""
        return SpanTable(self.starts.to(device), self.ends.to(device), self.valid.to(device), self.max_span)

    def index(self, start: int, end: int) -> int:
        """Span index of the body-relative span (start, end)."""
        return start * self.max_span + (end - start)

    def body_span(self, span_index: int) -> tuple[int, int]:
        """Body-relative (start, end) of a span index."""
        start, extra = divmod(int(span_index), self.max_span)
        return start, start + extra

    def gold_mask(self, gold_spans: Sequence[Sequence[tuple[int, int]]]) -> torch.Tensor:
        """[n, spans] True at each sequence's gold spans (from `find_gold_spans`); spans too
        wide, or past the part of the body the joint input kept, are dropped."""
        mask = torch.zeros_like(self.valid)
        for row, spans in enumerate(gold_spans):
            for start, end in spans:
                if end - start < self.max_span and self.index(start, end) < mask.shape[1]:
                    mask[row, self.index(start, end)] = True
        return mask & self.valid


def enumerate_spans(body_starts: torch.Tensor, body_lengths: torch.Tensor, max_span: int) -> SpanTable:
    """All spans of 1..max_span wordpieces inside each body.

    body_starts: [n] position of the body's first wordpiece in the joint input (len(q) + 2).
    body_lengths: [n] wordpieces in the body (0 for the null document: no spans).
    """
    offsets = torch.arange(int(body_lengths.max().clamp(min=1)), device=body_starts.device)
    widths = torch.arange(max_span, device=body_starts.device)
    offsets, widths = (t.flatten() for t in torch.meshgrid(offsets, widths, indexing="ij"))  # [spans]
    starts = body_starts[:, None] + offsets[None, :]  # [n, spans]
    valid = (offsets + widths)[None, :] < body_lengths[:, None]  # [n, spans]
    return SpanTable(starts=starts, ends=starts + widths[None, :], valid=valid, max_span=max_span)


def reader_inputs(
    tokenizer: WordPieceTokenizer,
    question_and_body_ids: Sequence[tuple[Sequence[int], Sequence[int]]],
    max_span: int = 10,
) -> tuple[BertInputs, SpanTable]:
    """Padded `[CLS] q [SEP] z_body [SEP]` inputs and their candidate spans, one row per
    (question, block) pair; spans follow the body as `join` actually kept it."""
    sequences = [joint_sequence(tokenizer, q, body) for q, body in question_and_body_ids]
    body_lengths = torch.tensor([sum(types) - 1 for _, types in sequences])  # type-1 tokens: body + [SEP]
    body_starts = torch.tensor([len(ids) for ids, _ in sequences]) - body_lengths - 1
    return pad_batch(sequences, tokenizer.pad_id), enumerate_spans(body_starts, body_lengths, max_span)


class Reader(BertPreTrainedModel):
    """BERT + span scorer MLP([h_start; h_end]) with `span_hidden_size` (256) hidden units.

    The MLP's first layer on the concatenation equals W_s h_start + W_e h_end, so it is applied
    once per position (one projection split in two halves) and summed per span, as ORQA does,
    instead of once per span; then ReLU, LayerNorm and a linear map to the score.
    """

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.span_projection = nn.Linear(config.hidden_size, 2 * config.span_hidden_size)
        self.span_norm = nn.LayerNorm(config.span_hidden_size, eps=config.layer_norm_eps)
        self.span_output = nn.Linear(config.span_hidden_size, 1)
        self.post_init()

    def span_logits(self, joint: BertInputs, spans: SpanTable) -> torch.Tensor:
        """[n, spans] float32 span scores; LOG_ZERO at invalid spans."""
        hidden = self.bert(**joint.as_kwargs()).last_hidden_state  # [n, length, hidden]
        start_part, end_part = self.span_projection(hidden).chunk(2, dim=-1)  # [n, length, span_hidden] x2
        span_hidden = _gather_positions(start_part, spans.starts) + _gather_positions(end_part, spans.ends)
        span_hidden = self.span_norm(torch.relu(span_hidden))  # [n, spans, span_hidden]
        logits = self.span_output(span_hidden).squeeze(-1)  # [n, spans]
        return mask_log_scores(logits, spans.valid)


def _gather_positions(states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """states [n, length, d], positions [n, spans] -> [n, spans, d]."""
    index = positions.clamp(max=states.shape[1] - 1)  # invalid spans may point past the end
    return states.gather(1, index[:, :, None].expand(-1, -1, states.shape[-1]))


def span_log_probs(span_logits: torch.Tensor) -> torch.Tensor:
    """[n, spans] log p(span|z,x): a softmax over each block's valid spans."""
    return torch.log_softmax(as_float32_or_wider(span_logits), dim=-1)


def reader_log_likelihood(span_logits: torch.Tensor, gold_mask: torch.Tensor) -> torch.Tensor:
    """log p(y|z,x) = logsumexp over gold spans of the span log-softmax, [n]; ≈ LOG_ZERO for a
    block with no gold span (it then gets no weight in the marginal)."""
    return masked_logsumexp(span_log_probs(span_logits), gold_mask, dim=-1)


@dataclass(frozen=True)
class BestSpan:
    candidate: int  # which of the k retrieved blocks
    start: int  # body-relative, inclusive
    end: int
    log_prob: float  # log p(z|x) + log p(span|z,x)


def best_span(
    retrieval_logits: torch.Tensor, span_logits: torch.Tensor, spans: SpanTable, candidate_mask: torch.Tensor
) -> BestSpan:
    """The most probable (block, span) of one question under p(z|x) p(span|z,x).

    retrieval_logits: [k]; span_logits: [k, spans]; candidate_mask: [k].
    """
    log_p_z = torch.log_softmax(mask_log_scores(retrieval_logits, candidate_mask), dim=-1)  # [k]
    joint = log_p_z[:, None] + span_log_probs(span_logits)  # [k, spans]
    flat = int(joint.argmax())
    candidate, span_index = divmod(flat, joint.shape[1])
    start, end = spans.body_span(span_index)
    return BestSpan(candidate, start, end, float(joint.flatten()[flat]))


def span_text(tokenizer: WordPieceTokenizer, body_ids: Sequence[int], start: int, end: int) -> str:
    """The answer text of a body-relative span (lowercased by the uncased vocabulary)."""
    return tokenizer.decode(list(body_ids[start : end + 1]))


def build_reader(config: ModelConfig) -> Reader:
    return build_component(Reader, config)
