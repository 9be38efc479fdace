"""Fine-tuning tests' shared settings and helpers: a short stage on the tiny corpus, its checkpoints read back."""

import dataclasses
import hashlib
from pathlib import Path

import torch

from realm.model.qa.answering import Answerer
from realm.model.networks.checkpoint import load_components
from realm.model.networks.config import build_component
from realm.model.training.stage_settings import FinetuneConfig
from realm.model.qa.qa_data import QAExample
from realm.model.networks.reader import build_reader
from realm.model.networks.retriever import Embedder
from realm.model.training.question_candidates import CandidateCache
from realm.model.training.train_finetune import FinetuneTrainer
from tests.model.corpus_fixture import CORPUS_QUESTIONS as EXAMPLES

CPU = torch.device("cpu")


UNANSWERABLE = QAExample("Who painted the Mona Lisa?", ["Leonardo da Vinci"], "test")


# Every block of the 8-block corpus is a candidate and is read, so every answerable question
# is answerable in its read blocks; no validation and no weight averaging unless a test asks for them.
CONFIG = FinetuneConfig(
    epochs=1, batch_size=3, learning_rate=1e-3, span_head_learning_rate=1e-3, warmup_fraction=0.25,
    checkpoint_every=2, log_every=1, num_read=8, num_candidates=8, validation_fraction=0, average_weights=False,
)


def train(qa_corpus, root, tiny_config, config=CONFIG, examples=EXAMPLES, init_checkpoint=None, reader_init=None):
    blocks_path, index_path = qa_corpus
    logged = []
    trainer = FinetuneTrainer(
        examples, blocks_path, index_path, init_checkpoint, str(root), tiny_config, config, CPU, reader_init=reader_init
    )
    result = trainer.run(logged.append)
    return result, logged


def weights(checkpoint) -> dict[str, torch.Tensor]:
    return {
        f"{name}.{key}": value
        for name, model in load_components(checkpoint).items()
        for key, value in model.state_dict().items()
    }


def answers_from_its_blocks(checkpoint, qa_corpus, tiny_config) -> None:
    """The checkpoint answers a question with a span of a block it read, as that block's text has it."""
    answerer = Answerer.from_checkpoint(checkpoint, qa_corpus[1], qa_corpus[0], tiny_config, CPU)
    prediction = answerer.answer([EXAMPLES[0].question], num_read=3)[0]
    read_from = next(e for e in prediction.evidence if e.block_id == prediction.block_id)
    assert prediction.answer and read_from.text[slice(*prediction.answer_offsets)] == prediction.answer


def warmed_up(tiny_config) -> dict[str, torch.nn.Module]:
    """A warm-up's components, its reader built with the span features as CONFIG's fine-tuning
    builds it (the flow refuses a warm-up and a fine-tuning that set them differently), the
    features away from their zero start so that a fresh table would not pass for the warm-up's."""
    reader = build_reader(dataclasses.replace(tiny_config, span_features=CONFIG.span_features))
    with torch.no_grad():
        for table in reader.span_features.parameters():
            table.normal_()
    return {"query_embedder": build_component(Embedder, tiny_config), "reader": reader}


def digests(path: str) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in Path(path).iterdir()}


def cache(retriever, tokenizer, blocks, examples, tiny_config, config=CONFIG) -> CandidateCache:
    return CandidateCache.build(retriever, tokenizer, blocks, examples, tiny_config, config)
