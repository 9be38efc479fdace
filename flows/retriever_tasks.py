"""Tasks over a trained retriever checkpoint, outside its own training stage: index the run's
blocks with its doc tower, and measure its recall before any fine-tuning."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from realm.schemas.run_layout import RunLayout

ZERO_SHOT_K = 5


@task(name="realm-build-retriever-index", cache_policy=NO_CACHE)
def build_retriever_index(
    output: str, model_preset: str, checkpoint: str, max_block_wordpieces: int, keep: int, device: str | None
) -> str:
    """`<output>/index/<checkpoint step>/`: every block embedded by `checkpoint`'s doc tower
    (built once; an existing publish of that step is reused)."""
    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from realm.model.publish import MANIFEST_FILE
    from realm.model.index.rebuild import rebuild_index

    layout = RunLayout.at(output)
    step = int(Path(checkpoint).name)
    if (Path(layout.index) / str(step) / MANIFEST_FILE).is_file():
        return str(Path(layout.index) / str(step))
    return str(rebuild_index(
        layout.blocks, str(Path(checkpoint) / "doc_embedder"), layout.embeddings, layout.index, step,
        ModelConfig.preset(model_preset), keep, device=select_device(device), max_block_wordpieces=max_block_wordpieces,
    ))


@task(name="realm-zero-shot-recall", cache_policy=NO_CACHE)
def zero_shot_recall(
    output: str, model_preset: str, eval_files: list[str], index_path: str, checkpoint: str | None, device: str | None
) -> dict[str, float]:
    """Recall@5 per dataset of a retriever before fine-tuning: the query tower of `checkpoint`
    over the dense index, or BM25."""
    from realm.model.qa.answering import retrieval_ranks
    from realm.model.index.block_store import BlockStore
    from realm.model.networks.checkpoint import load_components
    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from realm.model.qa.qa_data import read_qa_file
    from realm.model.qa.question_retrieval import load_question_retriever

    config, torch_device = ModelConfig.preset(model_preset), select_device(device)
    query_embedder = load_components(checkpoint, torch_device)["query_embedder"] if checkpoint else None
    retriever = load_question_retriever(index_path, query_embedder, config, torch_device)
    blocks = BlockStore.from_parquet(RunLayout.at(output).blocks, with_text=True)
    tokenizer = config.tokenizer()
    recall = {}
    for path in eval_files:
        examples = read_qa_file(path)
        ranks = retrieval_ranks(retriever, blocks, tokenizer, examples, ZERO_SHOT_K)
        recall[examples[0].dataset] = sum(r is not None for r in ranks) / len(ranks)
    return recall
