"""Fine-tuning settings, defined once: the trainer (`realm.model.train_finetune`), the
`realm-finetune-openqa` flow's form and `realm train finetune --param` all read this class.

Imports pydantic only (no torch), so the flows' parameter models load it cheaply.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from realm.model.tokenization import MAX_QUESTION_WORDPIECES


class FinetuneConfig(BaseModel):
    """Fine-tuning settings: what the trainer, the `realm-finetune-openqa` flow form and
    `realm train finetune --param` all read (the flow's parameters add the data and retriever)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # ~9 min an epoch with the 6-layer model on a 2-core CPU: four fit the main job's hour.
    epochs: float = Field(
        4.0, ge=0, description="passes over the training questions that carry a loss (ORQA: 20; 0 publishes the start)"
    )
    batch_size: int = Field(8, ge=1)
    # BERT's fine-tuning range is 2e-5..5e-5 (Devlin et al.); the span MLP starts from
    # scratch and learns at its own, higher rate.
    learning_rate: float = Field(5e-5, gt=0, description="peak rate of the query tower and the reader's BERT")
    span_head_learning_rate: float = Field(5e-4, gt=0, description="peak rate of the freshly initialised span MLP")
    warmup_fraction: float = Field(0.1, ge=0, lt=1, description="share of the steps the learning rate rises over")
    weight_decay: float = 0.01
    checkpoint_every: int = Field(200, ge=1, description="steps between checkpoints, each validated")
    log_every: int = Field(10, ge=1)
    num_read: int = Field(5, ge=1, description="blocks the reader reads per question (REALM and ORQA: 5)")
    num_candidates: int = Field(
        20, ge=1, description="blocks retrieved once per question: the early-update range and the pool read from"
    )
    validation_fraction: float = Field(
        0.05, ge=0, lt=1, description="questions held out by hash and answered at each checkpoint to pick the best"
    )
    max_question_wordpieces: int = MAX_QUESTION_WORDPIECES

    @model_validator(mode="after")
    def _read_within_candidates(self) -> FinetuneConfig:
        if self.num_read > self.num_candidates:
            raise ValueError(f"need num_read <= num_candidates, got {self.num_read} and {self.num_candidates}")
        return self
