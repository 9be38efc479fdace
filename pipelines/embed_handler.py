"""The doc tower as a Beam `ModelHandler`: what `RunInference` loads once per worker process
and calls with a window of blocks (`realm.pipelines.embed`).

The handler runs the in-process embedder's own code on each window (`embed_window`: blocks cut
to the trainer's length as a refresh cuts them, then embedded in length-sorted batches), so its
vectors are the in-process embedder's. A worker reads the snapshot and nothing else of the
run's: the tokenizer and the preset's autocast travel inside the handler, which Beam ships to
every worker, since the BERT a run started from (`--bert DIR`) is a directory on the machine
that started it. It imports torch and the networks of `realm.model` only inside `load_model`
and `run_inference`, on the worker: the pipeline modules import where torch is not installed,
as every other realm pipeline does.
"""

from __future__ import annotations

import gc
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import ModelHandler, PredictionResult

from realm.model.tokenization import WordPieceTokenizer

# Set in every Beam SDK harness process (a local runner's worker process, a Dataflow worker's):
# the harness reads its control endpoint from it.
HARNESS_ENVIRONMENT_VARIABLE = "CONTROL_API_SERVICE_DESCRIPTOR"

# What the handler reads of a block (the rest of blocks/ stays behind the reshuffle).
EMBED_BLOCK = pa.schema(
    [
        pa.field("block_id", pa.int64(), nullable=False),
        pa.field("title_token_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("body_token_ids", pa.list_(pa.int32()), nullable=False),
    ]
)


@contextmanager
def local_copy(directory: str) -> Iterator[str]:
    """`directory` itself when local, else a local copy of its files, deleted on leaving (a
    `gs://` snapshot: `from_pretrained` reads local files only, and a loaded tower needs its
    files no more: what it maps of them stays readable once they are unlinked)."""
    if os.path.isdir(directory):
        yield directory
        return
    with tempfile.TemporaryDirectory(prefix="realm-doc-tower-") as copy:
        for match in FileSystems.match([FileSystems.join(directory, "*")])[0].metadata_list:
            with FileSystems.open(match.path) as source, open(os.path.join(copy, match.path.rsplit("/", 1)[-1]), "wb") as target:
                shutil.copyfileobj(source, target)
        yield copy


class DocTowerHandler(ModelHandler[dict, PredictionResult, Any]):
    """`RunInference` over blocks (`EMBED_BLOCK` dicts): each call embeds a window of up to
    `window_blocks` blocks, `batch_blocks` per forward, and yields one `PredictionResult` per
    block (its id, its [128] float32 vector). `tokenizer`: the run's (its BERT's vocabulary);
    `cpu_bf16_autocast`: its model preset's; both read where the pipeline is launched."""

    def __init__(
        self,
        doc_embedder_dir: str,
        tokenizer: WordPieceTokenizer,
        cpu_bf16_autocast: bool,
        max_block_wordpieces: int,
        batch_blocks: int,
        window_blocks: int,
        torch_threads: int | None,
    ):
        # A fixed window: the adaptive estimator's small first batches would embed short,
        # unsorted groups; the length sort needs a window to sort.
        super().__init__(min_batch_size=window_blocks, max_batch_size=window_blocks)
        self.doc_embedder_dir = doc_embedder_dir
        self.tokenizer = tokenizer
        self.cpu_bf16_autocast = cpu_bf16_autocast
        self.max_block_wordpieces = max_block_wordpieces
        self.batch_blocks = batch_blocks
        self.torch_threads = torch_threads

    def load_model(self):
        """The doc tower (an `Embedder`), in eval mode on this worker's device."""
        import torch

        from realm.model.networks.config import load_pretrained
        from realm.model.networks.device import select_device
        from realm.model.networks.retriever import Embedder

        if self.torch_threads is not None:
            # Worker processes sharing a machine split its cores instead of each taking all of them.
            torch.set_num_threads(self.torch_threads)
        with local_copy(self.doc_embedder_dir) as directory:
            doc_embedder = load_pretrained(Embedder, directory).to(select_device()).eval()
        if HARNESS_ENVIRONMENT_VARIABLE in os.environ:
            # A worker process keeps its tower, torch and transformers to its end: out of the
            # collector's sight, they are not walked by its full collections nor at the
            # process's exit (about a second a worker, and a local runner stops its workers
            # one after another). A launching process that runs the handler itself is left alone.
            # The collection first, so no garbage of the load is kept with them.
            gc.collect()
            gc.freeze()
        return doc_embedder

    def run_inference(
        self, batch: Sequence[dict], doc_embedder, inference_args: dict[str, Any] | None = None
    ) -> Iterable[PredictionResult]:
        from realm.model.index.embed_corpus import embed_window
        from realm.model.index.rebuild import fit_block_batch

        window = pa.Table.from_batches([
            fit_block_batch(pa.RecordBatch.from_pylist(list(batch), schema=EMBED_BLOCK), self.max_block_wordpieces)
        ])
        vectors = embed_window(  # [rows, 128]
            doc_embedder, self.tokenizer, window, self.batch_blocks, doc_embedder.device, self.cpu_bf16_autocast
        )
        return [PredictionResult(block["block_id"], vector) for block, vector in zip(batch, vectors)]
