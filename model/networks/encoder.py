"""The knowledge-augmented encoder: BERT masked-LM over `join(x, z_body)` (REALM §3.2).

log p(y|z,x) = Σ_j log p(y_j|z,x) over the masked wordpieces of x. MLM logits are computed
only at the masked positions (a few per sequence): materialising [batch·k, length, 30522]
would cost ~100x the memory and the vocabulary matmul of every other position for nothing.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import BertConfig, BertForMaskedLM

from realm.model.networks.block_copy import BlockCopyHead
from realm.model.networks.config import ModelConfig, build_component
from realm.model.networks.inputs import BertInputs, body_mask, hidden_states_with_added_embeddings


class KnowledgeAugmentedEncoder(BertForMaskedLM):
    """BertForMaskedLM (output embedding tied to the input one) scoring masked targets, with
    the reader's learned vector for block wordpieces the masked sentence also says
    (`question_match`, `realm.model.networks.question_match`), added where the inputs carry
    flags. It starts at zero (a checkpoint saved without it loads it as zero), and fine-tuning
    hands it to the reader with the encoder's BERT (`realm.model.training.finetune_start`).
    `copy_head` mixes a pointer over the block's wordpieces into the vocabulary distribution
    when asked to (`realm.model.networks.block_copy`); a checkpoint saved without it loads it
    freshly initialised."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.question_match = nn.Embedding(2, config.hidden_size, padding_idx=0)  # row 0: no match, nothing added
        nn.init.zeros_(self.question_match.weight)
        self.copy_head = BlockCopyHead(config.hidden_size)
        self.copy_head.apply(self._init_weights)  # BertForMaskedLM's post_init ran before it existed

    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if module is getattr(self, "question_match", None):
            nn.init.zeros_(module.weight)

    def masked_log_probs(
        self, joint: BertInputs, mlm_positions: torch.Tensor, mlm_mask: torch.Tensor, copy_from_block: bool = False
    ) -> torch.Tensor:
        """log p(v|z,x) over the vocabulary at every real masked slot, float32 [masked, vocab],
        slots in `mlm_mask.nonzero()` order (arguments as in `masked_log_likelihood`; the
        `question_match` vector is added where `joint.question_match` flags a wordpiece;
        `copy_from_block` mixes in the pointer over each sequence's body)."""
        if joint.question_match is None:
            hidden = self.bert(**joint.as_kwargs()).last_hidden_state  # [n, length, hidden]
        else:
            hidden = hidden_states_with_added_embeddings(self.bert, joint, self.question_match(joint.question_match))
        rows, slots = mlm_mask.nonzero(as_tuple=True)  # [masked], [masked]
        positions = mlm_positions[rows, slots]  # [masked]
        log_probs = torch.log_softmax(self.cls(hidden[rows, positions]).float(), dim=-1)  # [masked, vocab]
        if not copy_from_block:
            return log_probs
        return self.copy_head.mix(log_probs, hidden, rows, positions, joint.input_ids, body_mask(joint))

    def masked_log_likelihood(
        self,
        joint: BertInputs,
        mlm_positions: torch.Tensor,
        mlm_targets: torch.Tensor,
        mlm_mask: torch.Tensor,
        copy_from_block: bool = False,
    ) -> torch.Tensor:
        """log p(y|z,x) of each joint sequence, float32 [n].

        joint: [n, length] inputs `[CLS] x [SEP] z_body [SEP]`.
        mlm_positions, mlm_targets, mlm_mask: [n, max_masks] positions in the joint input of
        the masked wordpieces, their original ids, and which of the slots are real.
        copy_from_block: as in `masked_log_probs`.
        """
        log_probs = self.masked_log_probs(joint, mlm_positions, mlm_mask, copy_from_block)  # [masked, vocab]
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
    """Warm start keeps the MLM head when the checkpoint has one (MiniLM's has not)."""
    return build_component(KnowledgeAugmentedEncoder, config)
