"""The reproduction table: REALM vs ICT-only (ORQA) vs BM25 + reader, and the ablations.

    python bench/reproduce.py --qa-dir ../shared/data/qa [--preset default|gpu] [--output runs/reproduce]

Trains and evaluates every system of `realm.flows.reproduce` on the embedded vital corpus
(train on the *.train.jsonl files, evaluate on nq.dev.jsonl and a held-out tenth of the other
training sets), prints the markdown table (also in `<output>/results.md`, with
`results.parquet` and the bar chart `results.png`) and ends with one JSON line
{"<system>": {"<dataset>": {"em", "em_per_seed", "seeds", "recall_at_5", "zero_shot_recall_at_5", "n"}}}
(em and recall_at_5 averaged over the fine-tuning seeds, `--seeds`).
The same as `realm reproduce ... --json`; a re-run skips every finished stage.
"""

from __future__ import annotations

import sys

from realm.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["reproduce", *sys.argv[1:], "--json"]))
