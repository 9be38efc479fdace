"""The knowledge-augmented encoder: BERT masked-LM over `join(x, z_body)` (REALM §3.2).

log p(y|z,x) = Σ_j log p(y_j|z,x) over the masked wordpieces of x. MLM logits are computed
only at the masked positions (a few per sequence): materialising [batch·k, length, 30522]
would cost ~100x the memory and the vocabulary matmul of every other position for nothing.
"""

from __future__ import annotations

import torch
from transformers import BertForMaskedLM

from realm.model.config import ModelConfig, build_component
from realm.model.inputs import BertInputs


class KnowledgeAugmentedEncoder(BertForMaskedLM):
    """BertForMaskedLM (output embedding tied to the input one) scoring masked targets."""

    def masked_log_likelihood(
        self,
        joint: BertInputs,
        mlm_positions: torch.Tensor,
        mlm_targets: torch.Tensor,
        mlm_mask: torch.Tensor,
    ) -> torch.Tensor:
        """log p(y|z,x) of each joint sequence, float32 [n].

        joint: [n, length] inputs `[CLS] x [SEP] z_body [SEP]`.
        mlm_positions, mlm_targets, mlm_mask: [n, max_masks] positions in the joint input of
        the masked wordpieces, their original ids, and which of the slots are real.
        """
        hidden = self.bert(**joint.as_kwargs()).last_hidden_state  # [n, length, hidden]
        rows, slots = mlm_mask.nonzero(as_tuple=True)  # [masked], [masked]
        masked_hidden = hidden[rows, mlm_positions[rows, slots]]  # [masked, hidden]
        logits = self.cls(masked_hidden).float()  # [masked, vocab]
        target_log_probs = torch.log_softmax(logits, dim=-1).gather(
            1, mlm_targets[rows, slots].unsqueeze(1)
        ).squeeze(1)  # [masked]
        return torch.zeros(len(joint), device=logits.device).index_add(0, rows, target_log_probs)


def build_encoder(config: ModelConfig) -> KnowledgeAugmentedEncoder:
    """Warm start keeps the MLM head when the checkpoint has one (MiniLM's has not)."""
    return build_component(KnowledgeAugmentedEncoder, config)
