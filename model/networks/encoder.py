"""The knowledge-augmented encoder: BERT masked-LM over `join(x, z_body)` (REALM §3.2).

log p(y|z,x) = Σ_j log p(y_j|z,x) over the masked wordpieces of x. MLM logits are computed
only at the masked positions (a few per sequence): materialising [batch·k, length, 30522]
would cost ~100x the memory and the vocabulary matmul of every other position for nothing.
"""

from __future__ import annotations

import torch
from transformers import BertForMaskedLM

from realm.model.networks.config import ModelConfig, build_component
from realm.model.networks.inputs import BertInputs


class KnowledgeAugmentedEncoder(BertForMaskedLM):
    """BertForMaskedLM (output embedding tied to the input one) scoring masked targets. A
    checkpoint saved with the modules of levers since removed (a question-match vector, a copy
    head) loads without them."""

    def masked_log_probs(self, joint: BertInputs, mlm_positions: torch.Tensor, mlm_mask: torch.Tensor) -> torch.Tensor:
        """log p(v|z,x) over the vocabulary at every real masked slot, float32 [masked, vocab],
        slots in `mlm_mask.nonzero()` order (arguments as in `masked_log_likelihood`)."""
        hidden = self.bert(**joint.as_kwargs()).last_hidden_state  # [n, length, hidden]
        rows, slots = mlm_mask.nonzero(as_tuple=True)  # [masked], [masked]
        positions = mlm_positions[rows, slots]  # [masked]
        return torch.log_softmax(self.cls(hidden[rows, positions]).float(), dim=-1)  # [masked, vocab]

    def masked_log_likelihood(
        self, joint: BertInputs, mlm_positions: torch.Tensor, mlm_targets: torch.Tensor, mlm_mask: torch.Tensor
    ) -> torch.Tensor:
        """log p(y|z,x) of each joint sequence, float32 [n].

        joint: [n, length] inputs `[CLS] x [SEP] z_body [SEP]`.
        mlm_positions, mlm_targets, mlm_mask: [n, max_masks] positions in the joint input of
        the masked wordpieces, their original ids, and which of the slots are real.
        """
        log_probs = self.masked_log_probs(joint, mlm_positions, mlm_mask)  # [masked, vocab]
        return masked_target_log_likelihood(log_probs, mlm_targets, mlm_mask)


def masked_target_log_likelihood(
    log_probs: torch.Tensor, mlm_targets: torch.Tensor, mlm_mask: torch.Tensor
) -> torch.Tensor:
    """Σ over each sequence's real slots of log p(target): `log_probs` [masked, vocab] in
    `mlm_mask.nonzero()` order, mlm_targets/mlm_mask [n, max_masks] -> [n]."""
    rows, slots = mlm_mask.nonzero(as_tuple=True)  # [masked], [masked]
    target_log_probs = log_probs.gather(1, mlm_targets[rows, slots].unsqueeze(1)).squeeze(1)  # [masked]
    return torch.zeros(len(mlm_mask), device=log_probs.device).index_add(0, rows, target_log_probs)


def build_encoder(config: ModelConfig) -> KnowledgeAugmentedEncoder:
    """Warm start keeps the MLM head when the directory has one (a BertForMaskedLM's: its
    transform and decoder bias, the decoder weight tied to the input embedding); MiniLM's has
    none, so it starts fresh. `build_component` logs which."""
    encoder = build_component(KnowledgeAugmentedEncoder, config)
    _draw_as_the_removed_modules(encoder.config.hidden_size, warm_started=config.model_dir is not None)
    return encoder


def _draw_as_the_removed_modules(hidden_size: int, warm_started: bool) -> None:
    """Draw from the seeded generator what the encoder's removed question-match vector and copy
    head drew when built (last of its modules), so a seeded run draws everything after the
    encoder as before. A random init ran their constructors (uniform draws) and then BERT's
    init (normal draws); a warm start only BERT's init of the weights it lacked."""
    square, gate = (hidden_size, hidden_size), (1, hidden_size)
    torch.empty(2, hidden_size).normal_()  # the question-match vector's embedding
    if not warm_started:
        for shape in (square, (hidden_size,), square, (hidden_size,), gate, (1,)):  # query, key, gate: weight, bias
            torch.empty(shape).uniform_()
    for shape in (square, square, gate):
        torch.empty(shape).normal_()
