"""Tasks over a trained retriever checkpoint, outside its own training stage: index the run's
blocks with its doc tower, and measure its recall before any fine-tuning."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from realm.schemas.run_layout import RunLayout

ZERO_SHOT_K = 5


@task(name="realm-build-retriever-index", cache_policy=NO_CACHE)
def build_retriever_index(
    output: str, model_preset: str, checkpoint: str, max_block_wordpieces: int, keep: int, device: str | None
) -> str:
    """`<output>/index/<checkpoint step>/`: every block embedded by `checkpoint`'s doc tower
    (built once; an existing publish of that step is reused only if built from that doc tower,
    the run's blocks and `max_block_wordpieces`: a retrained retriever can have the same step)."""
    from realm.model.index.lineage import doc_tower_fingerprint, lineage_mismatches
    from realm.model.index.rebuild import rebuild_index
    from realm.model.networks.config import ModelConfig
    from realm.model.networks.device import select_device
    from realm.model.publish import MANIFEST_FILE
    from realm.schemas import BLOCKS, read_table

    layout = RunLayout.at(output)
    step = int(Path(checkpoint).name)
    doc_embedder = str(Path(checkpoint) / "doc_embedder")
    published = Path(layout.index) / str(step)
    if (published / MANIFEST_FILE).is_file():
        block_ids = read_table(layout.blocks, BLOCKS, columns=["block_id"])["block_id"].to_numpy()
        stale = lineage_mismatches(published, doc_tower_fingerprint(doc_embedder, step), block_ids, max_block_wordpieces)
        if not stale:
            return str(published)
        get_run_logger().warning("%s was built from another %s: building it again", published, " and ".join(stale))
    return str(rebuild_index(
        layout.blocks, doc_embedder, layout.embeddings, layout.index, step,
        ModelConfig.preset(model_preset, bert_dir=layout.bert_dir()), keep, device=select_device(device), max_block_wordpieces=max_block_wordpieces,
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

    config = ModelConfig.preset(model_preset, bert_dir=RunLayout.at(output).bert_dir())
    torch_device = select_device(device)
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
