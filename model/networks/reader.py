"""The Open-QA reader: BERT over `join(q, z_body)`, span score MLP([h_start; h_end]) (REALM §3.2, ORQA).

Candidate spans are every span of at most 10 wordpieces inside the block body; the
question and the special tokens are never an answer. As ORQA's reader (the code REALM's
fine-tuning ran) does it, every span's logit is its span score plus its block's retrieval
logit f(x,z), and one softmax runs over all spans of all read blocks together
(`joint_span_logits`): the loss marginalises over every gold span in any block, so blocks
without the answer are negatives that get a gradient (`joint_reader_loss`), and the
prediction is the argmax of the same logits (`best_span`). Scoring each block's spans with
their own softmax instead lets the block whose span distribution is most peaked win,
whatever its relevance. The answer is the block's original text between the span's
character offsets (`span_text`), not detokenized wordpieces. The block's words that the
question also says are marked in the input (`realm.model.networks.question_match`), and so
are the named entities' types (`realm.model.networks.entity_types`). A reader built with
`span_features` adds learned vectors of each span's width and nearness to the question's words
to its hidden layer (`realm.model.networks.span_features`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from transformers import BertConfig, BertModel, BertPreTrainedModel

from realm.model.networks.config import ModelConfig, build_component
from realm.model.networks.entity_types import NUM_ENTITY_TYPES
from realm.model.networks.inputs import (
    BertInputs,
    body_positions,
    hidden_states_with_added_embeddings,
    joint_sequence,
    pad_batch,
    same_padded_length_groups,
)
from realm.model.networks.marginal import LOG_ZERO, as_float32_or_wider, mask_log_scores, masked_logsumexp
from realm.model.networks.question_match import question_match_flags
from realm.model.networks.span_features import SpanFeatures
from realm.model.tokenization import WordPieceTokenizer


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

    def rows(self, index: torch.Tensor, spans: int) -> SpanTable:
        """The rows `index`, cut to their first `spans` spans."""
        return SpanTable(self.starts[index, :spans], self.ends[index, :spans], self.valid[index, :spans], self.max_span)

    def index(self, start: int, end: int) -> int:
        """Span index of the body-relative span (start, end)."""
        return start * self.max_span + (end - start)

    def body_span(self, span_index: int) -> tuple[int, int]:
        """Body-relative (start, end) of a span index."""
        start, extra = divmod(int(span_index), self.max_span)
        return start, start + extra

    def gold_mask(self, gold_spans: Sequence[Sequence[tuple[int, int]]]) -> torch.Tensor:
        """[n, spans] True at each sequence's gold spans (from `realm.model.qa.gold_spans`); spans too
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
    entity_types: Sequence[Sequence[int]],
    max_span: int = 10,
) -> tuple[BertInputs, SpanTable]:
    """Padded `[CLS] q [SEP] z_body [SEP]` inputs with their `question_match` flags and the
    body wordpieces' `entity_types` (one list per pair, as long as its body: 0 outside an
    entity), and their candidate spans, one row per (question, block) pair; spans follow the
    body as `join` actually kept it."""
    if len(entity_types) != len(question_and_body_ids):
        raise ValueError(f"{len(entity_types)} entity-type lists for {len(question_and_body_ids)} (question, block) pairs")
    joint = pad_batch([joint_sequence(tokenizer, q, body) for q, body in question_and_body_ids], tokenizer.pad_id)
    body_starts, body_lengths = body_positions(joint)
    joint.question_match = question_match_flags(tokenizer, joint, question_and_body_ids)
    joint.entity_types = torch.zeros_like(joint.input_ids)
    for row, (start, length) in enumerate(zip(body_starts.tolist(), body_lengths.tolist())):
        _, body = question_and_body_ids[row]
        if len(entity_types[row]) != len(body):
            raise ValueError(f"pair {row}: {len(entity_types[row])} entity types for a body of {len(body)} wordpieces")
        joint.entity_types[row, start : start + length] = torch.tensor(entity_types[row][:length], dtype=torch.long)
    return joint, enumerate_spans(body_starts, body_lengths, max_span)


class Reader(BertPreTrainedModel):
    """BERT + span scorer MLP([h_start; h_end]) with `span_hidden_size` (256) hidden units, and
    learned vectors added to the word embedding of each block wordpiece the question also says
    (`question_match`) and of each one inside a named entity, one per type (`entity_type`, see
    `realm.model.networks.entity_types`). Both start at zero, so a warm start reads as it did,
    and a checkpoint saved without them loads them as zero too.

    The MLP's first layer on the concatenation equals W_s h_start + W_e h_end, so it is applied
    once per position (one projection split in two halves) and summed per span, as ORQA does,
    instead of once per span; then ReLU, LayerNorm and a linear map to the score. With
    `config.span_features`, each span's width, distance to the block's nearest question word
    and whether it holds one add their learned vectors (from zero) to the MLP's hidden layer
    (`realm.model.networks.span_features`).
    """

    # The optional modules that start at zero and draw nothing (`__init__`, `_init_weights`).
    OPTIONAL_ZERO_START = ("span_features",)

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.span_projection = nn.Linear(config.hidden_size, 2 * config.span_hidden_size)
        self.span_norm = nn.LayerNorm(config.span_hidden_size, eps=config.layer_norm_eps)
        self.span_output = nn.Linear(config.span_hidden_size, 1)
        self.question_match = nn.Embedding(2, config.hidden_size, padding_idx=0)  # row 0: no match, nothing added
        self.entity_type = nn.Embedding(NUM_ENTITY_TYPES, config.hidden_size, padding_idx=0)  # row 0: no entity
        featured = getattr(config, "span_features", False)
        # The optional modules start at zero and draw nothing from the seeded generator, built or
        # initialised: turning one on leaves every other draw of a seeded run where it was.
        with torch.random.fork_rng(devices=[]):
            self.span_features = SpanFeatures(config.max_span_wordpieces, config.span_hidden_size) if featured else None
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        # Added features start at zero, so a warm start reads as it did.
        if any(module is layer for layer in self._optional_layers()):
            nn.init.zeros_(module.weight)
            return
        super()._init_weights(module)
        if any(module is getattr(self, name, None) for name in ("question_match", "entity_type")):
            nn.init.zeros_(module.weight)

    def _optional_layers(self) -> list[nn.Module]:
        """The weight-holding layers of the optional modules built (`OPTIONAL_ZERO_START`)."""
        built = (getattr(self, name, None) for name in self.OPTIONAL_ZERO_START)
        return [
            layer for module in built if module is not None
            for layer in module.modules() if isinstance(layer, (nn.Linear, nn.Embedding))
        ]

    def fresh_modules(self) -> list[nn.Module]:
        """The span MLP, the question-match and entity-type vectors and the span features, which
        no warm start holds; fine-tuning gives them their own learning rate."""
        extra = [self.span_features] if self.span_features is not None else []
        return [self.span_projection, self.span_norm, self.span_output, self.question_match, self.entity_type, *extra]

    def span_logits(self, joint: BertInputs, spans: SpanTable) -> torch.Tensor:
        """[n, spans] float32 span scores; LOG_ZERO at invalid spans. `joint` from `reader_inputs`."""
        if joint.question_match is None or joint.entity_types is None:
            raise ValueError("reader inputs need their question_match flags and entity types (built by reader_inputs)")
        if self.span_features is not None and spans.max_span > self.span_features.max_span:
            raise ValueError(
                f"spans of up to {spans.max_span} wordpieces, but the reader's span features know widths up to "
                f"{self.span_features.max_span} (its max_span_wordpieces)"
            )
        hidden = hidden_states_with_added_embeddings(
            self.bert, joint, self.question_match(joint.question_match), self.entity_type(joint.entity_types)
        )  # [n, length, hidden]
        # The head runs in float32 even under bf16 autocast: one softmax ranks thousands of
        # spans against each other, and bf16's 8-bit mantissa ties scores ~0.4% apart.
        with torch.autocast(hidden.device.type, enabled=False):
            hidden = hidden.float()
            start_part, end_part = self.span_projection(hidden).chunk(2, dim=-1)  # [n, length, span_hidden] x2
            span_hidden = _span_sums(start_part, end_part, spans)  # [n, spans, span_hidden]
            if self.span_features is not None:
                span_hidden.add_(self.span_features(joint.question_match, spans.starts, spans.ends))
            span_hidden = self.span_norm(span_hidden.relu_())
            logits = self.span_output(span_hidden).squeeze(-1)  # [n, spans]
        return mask_log_scores(logits, spans.valid)


def span_logits_by_length(reader: Reader, joint: BertInputs, spans: SpanTable) -> torch.Tensor:
    """`reader.span_logits` of every row, [n, spans], each row padded to its own
    `padded_length` and read with the rows of that padded length (`same_padded_length_groups`):
    a row is then read at the same length in any batch, so an answer hardly depends on the
    other questions read beside it (`realm.model.networks.inputs.PAD_MULTIPLE`), and rows of
    similar length share a forward instead of being padded to a batch's longest. Answering and
    fine-tuning both read this way; gradients flow through every group's forward."""
    logits = torch.full(spans.valid.shape, LOG_ZERO, device=joint.input_ids.device)
    for group, length in same_padded_length_groups(joint.attention_mask.sum(dim=1).tolist()):
        rows = torch.tensor(group, device=joint.input_ids.device)
        # A span index is its body offset x max_span + width: a body within `length` wordpieces has none beyond.
        columns = min(length * spans.max_span, spans.valid.shape[1])
        logits[rows, :columns] = reader.span_logits(joint.rows(rows, length), spans.rows(rows, columns))
    return logits


def _span_sums(start_part: torch.Tensor, end_part: torch.Tensor, spans: SpanTable) -> torch.Tensor:
    """start_part at each span's start + end_part at its end, [n, spans, d], from the table's
    layout (span index = body offset · max_span + width − 1; `enumerate_spans`): one gather of
    the body's positions per part and a sliding window over the ends, instead of two gathers of
    max_span rows per position (the same sums, with a tenth of the rows gathered)."""
    n, _, d = start_part.shape
    offsets = spans.starts.shape[1] // spans.max_span
    positions = spans.starts[:, :1] + torch.arange(offsets + spans.max_span - 1, device=spans.starts.device)
    starts = _gather_positions(start_part, positions[:, :offsets])  # [n, offsets, d]
    ends = _gather_positions(end_part, positions).unfold(1, spans.max_span, 1)  # [n, offsets, d, max_span]
    return (starts[:, :, None, :] + ends.transpose(2, 3)).reshape(n, offsets * spans.max_span, d)


def _gather_positions(states: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """states [n, length, d], positions [n, spans] -> [n, spans, d]. Whole rows of the
    flattened states: faster on a CPU than `gather` with an index expanded over d."""
    n, length, d = states.shape
    index = positions.clamp(max=length - 1)  # invalid spans may point past the end
    rows = index + torch.arange(n, device=states.device)[:, None] * length
    return states.reshape(n * length, d).index_select(0, rows.flatten()).view(n, -1, d)


def joint_span_logits(
    span_logits: torch.Tensor, retrieval_logits: torch.Tensor, candidate_mask: torch.Tensor
) -> torch.Tensor:
    """ORQA's reader logits: span score + the block's retrieval logit, every span of every read
    block in one row, [batch, read · spans] float32; LOG_ZERO at invalid spans and at
    candidates outside `candidate_mask`.

    span_logits: [batch, read, spans]; retrieval_logits, candidate_mask: [batch, read].
    Up to a per-question constant, log_softmax of the result is log p(z|x) + log of the
    block's unnormalised span score, normalised over all spans of all read blocks together.
    """
    logits = as_float32_or_wider(span_logits) + mask_log_scores(retrieval_logits, candidate_mask)[:, :, None]
    return logits.flatten(1)  # masked entries are ≤ LOG_ZERO + a logit: exp() of them is exactly 0


def joint_reader_loss(joint_logits: torch.Tensor, gold_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(−log Σ_{gold spans} softmax(joint_logits), answerable), both [batch]; the loss is 0
    (still connected to the graph) where no read span is gold.

    joint_logits, gold_mask: [batch, read · spans] (`joint_span_logits`; the gold mask in the
    same block-major order, `SpanTable.gold_mask` rows of a question's blocks concatenated).
    """
    answerable = gold_mask.any(dim=-1)  # [batch]
    log_z = torch.logsumexp(joint_logits, dim=-1)  # [batch]
    log_gold = masked_logsumexp(joint_logits, gold_mask, dim=-1)  # [batch]
    return torch.where(answerable, log_z - log_gold, torch.zeros_like(log_z)), answerable


@dataclass(frozen=True)
class BestSpan:
    candidate: int  # which of the read blocks
    start: int  # body-relative, inclusive
    end: int
    log_prob: float  # log of its share of the joint softmax over every span of the read blocks


def best_span(joint_logits: torch.Tensor, spans: SpanTable) -> BestSpan:
    """The argmax span of one question's `joint_span_logits` row, [read · spans]."""
    log_probs = torch.log_softmax(joint_logits, dim=-1)
    flat = int(log_probs.argmax())
    candidate, span_index = divmod(flat, spans.valid.shape[1])
    start, end = spans.body_span(span_index)
    return BestSpan(candidate, start, end, float(log_probs[flat]))


def body_offsets(tokenizer: WordPieceTokenizer, body_ids: Sequence[int], body_text: str) -> list[tuple[int, int]] | None:
    """Character span in `body_text` (the block's `text`) of each body wordpiece, or None if
    the text does not re-tokenize to the body. The chunker's body wordpieces are the text's
    own (BERT's pre-tokenizer never joins across the whitespace a block starts and ends at),
    so None means a block from elsewhere."""
    encoding = tokenizer.encode_with_offsets(body_text)
    return encoding.offsets if encoding.ids == list(body_ids) else None


def span_text(tokenizer: WordPieceTokenizer, body_ids: Sequence[int], body_text: str, start: int, end: int) -> str:
    """The answer: `body_text` between the character offsets of the body-relative wordpiece
    span, so "Jay-Z", "1,000,000" and accents come back as written; the decoded wordpieces
    (lowercase, spaced punctuation) for a text that is not the body's (`body_offsets`)."""
    return span_at(tokenizer, body_ids, body_text, body_offsets(tokenizer, body_ids, body_text), start, end)[0]


def span_at(
    tokenizer: WordPieceTokenizer,
    body_ids: Sequence[int],
    body_text: str,
    offsets: list[tuple[int, int]] | None,
    start: int,
    end: int,
) -> tuple[str, tuple[int, int] | None]:
    """`span_text` and the span's character offsets in `body_text` (None where the text is not
    the body's), given the block's `body_offsets` computed once for all its spans."""
    if offsets is None:
        return tokenizer.decode(list(body_ids[start : end + 1])), None
    chars = (offsets[start][0], offsets[end][1])
    return body_text[chars[0] : chars[1]], chars


def build_reader(config: ModelConfig) -> Reader:
    return build_component(Reader, config)
