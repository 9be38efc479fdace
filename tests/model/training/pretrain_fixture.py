"""Pre-training tests' shared settings and helpers: a tiny-preset trainer over the toy corpus, steps run and compared."""

from pathlib import Path

import torch

from realm.model.training.stage_settings import PretrainConfig
from realm.model.training.pretrain_index import IndexRoots
from realm.model.training.train_pretrain import PretrainTrainer

CPU = torch.device("cpu")


# Short lengths and a small k keep a tiny-preset step well under a second.
# Both towers trained from the first step, candidates re-embedded by the doc tower (REALM's
# own recipe; the stage's defaults freeze the retriever).
CONFIG = PretrainConfig(
    steps=4, batch_size=2, num_candidates=4, learning_rate=1e-3, warmup_steps=1, heldout_examples=4,
    max_query_wordpieces=24, max_block_wordpieces=24, doc_tower="whole", retriever_frozen_steps=0,
)


OUTSIDE_CORPUS = 10**6  # origin block ids of the examples: not in Z, so no block is forbidden


def trainer(corpus, root: Path, tiny_config, config=CONFIG) -> PretrainTrainer:
    blocks_path, examples_path = corpus
    trainer = PretrainTrainer(blocks_path, examples_path, str(root / "checkpoints"), tiny_config, config, device=CPU)
    trainer.attach_index(roots(root))
    return trainer


def roots(root: Path) -> IndexRoots:
    return IndexRoots(str(root / "index"), str(root / "embeddings"), str(root / "snapshots"), str(root / "pooled_states"))


def run(trainer: PretrainTrainer, steps: int) -> list[dict]:
    return [trainer.train_step() for _ in range(steps)]


def comparable(metrics: list[dict]) -> list[dict]:
    timing = {"steps_per_s", "eta_s", "elapsed_s"}
    return [{k: v for k, v in m.items() if k not in timing} for m in metrics]
