import pyarrow.parquet as pq

from realm.flows.realm_pipeline import realm_pipeline
from realm.schemas import PREDICTIONS, read_table
from tests.flows.conftest import tiny_params


def test_whole_chain_end_to_end_then_a_rerun_is_all_cache_hits(run_root):
    params = tiny_params(run_root)
    result = realm_pipeline(params)

    assert result["ict"]["step"] == 6 and 0.0 <= result["ict"]["heldout_accuracy"] <= 1.0
    assert result["pretrain"]["step"] == 6
    assert {"accuracy_with_retrieval", "accuracy_null_only"} <= set(result["pretrain"])
    assert result["pretrain"]["refreshes"], "no asynchronous refresh was swapped in"
    assert result["finetune"]["step"] == 4
    demo = result["evaluate"]["demo"]
    assert demo["n"] == 40 and 0.0 <= demo["em"] <= 1.0
    assert demo["recall_at_1"] <= demo["recall_at_5"] <= demo["recall_at_20"]
    predictions = read_table(str(run_root / "predictions" / "demo.parquet"), PREDICTIONS)
    assert predictions.num_rows == 40
    assert all(len(ids) == 20 for ids in predictions["block_ids"].to_pylist())
    for stage in ("ict", "pretrain", "finetune"):
        assert (run_root / "reports" / f"{stage}_loss.png").stat().st_size > 0
    assert pq.read_schema(next((run_root / "predictions").glob("*.parquet"))).names == PREDICTIONS.names

    logged = {stage: (run_root / "reports" / f"{stage}_metrics.jsonl").read_text() for stage in ("ict", "finetune")}
    again = realm_pipeline(params)
    assert again["ict"] == result["ict"] and again["finetune"] == result["finetune"]
    # Cache hits: the cached stages logged no training step the second time.
    assert {stage: (run_root / "reports" / f"{stage}_metrics.jsonl").read_text() for stage in logged} == logged
