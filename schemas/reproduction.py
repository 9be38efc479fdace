"""`reproduction/results.parquet`: one row per (system, fine-tuning seed, dataset) of the REALM vs ORQA vs BM25 table."""

import pyarrow as pa

from realm.schemas.io import added_on

REPRODUCTION_RESULTS = pa.schema(
    [
        pa.field("system", pa.string(), nullable=False),  # bm25, orqa, realm, or an ablation's name
        pa.field("dataset", pa.string(), nullable=False),
        pa.field("n", pa.int64(), nullable=False),  # questions evaluated
        pa.field("exact_match", pa.float64(), nullable=False),
        # exact match among the questions with an answer in the blocks read; null when none has
        pa.field("reader_accuracy", pa.float64(), nullable=True),
        pa.field("recall_at_5", pa.float64(), nullable=False),  # after fine-tuning
        pa.field("zero_shot_recall_at_5", pa.float64(), nullable=False),  # the retriever before fine-tuning
        pa.field("train_seconds", pa.float64(), nullable=False),  # every stage the system needs, shared ones included
        pa.field("seed", pa.int64(), nullable=False),  # the fine-tuning's (`ReproduceParams.fine_tuning_seeds`)
        # `ReproduceParams.settings_digest` of the invocation that trained the row: a later one
        # with other settings does not carry it over (null in tables written before the column)
        added_on(pa.field("settings_sha256", pa.string(), nullable=True), "2026-11-28"),
    ]
)
