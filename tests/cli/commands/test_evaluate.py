import realm.flows.evaluate
from realm.cli.answering import NUM_READ
from realm.cli.main import main
from realm.flows.params import PipelineParams
from realm.schemas.run_layout import RunLayout
from tests.model.corpus_fixture import CORPUS_QUESTIONS


def test_evaluate_without_qa_evaluates_the_demo_set_and_the_shipped_held_out_sets(monkeypatch, tmp_path):
    from realm.flows.demo import demo_qa_path, evaluation_qa_paths

    seen = []
    monkeypatch.setattr(realm.flows.evaluate, "evaluate", lambda run, params, corpus: seen.append((run, params)) or {})
    made_with = PipelineParams.preset("default").run.model_preset
    RunLayout.at(tmp_path).record_model_preset(made_with)
    assert main(["evaluate", "--run", str(tmp_path)]) == 0
    ((run, params),) = seen
    files = realm.flows.evaluate.question_files(params)
    assert files == evaluation_qa_paths() and files[0] == str(demo_qa_path()) and len(files) > 1
    assert (run.output, run.model_preset, params.num_read) == (str(tmp_path), made_with, NUM_READ)


def test_evaluate_reports_the_reader_accuracy_its_predictions_hold(trained_run, tmp_path, capsys):
    """Reader accuracy given retrieval is the exact match among the questions whose answer is in
    the blocks read: reading all 8 blocks, every question's; reading one, those whose first block
    holds it, as the predictions written beside it say."""
    import json

    import pyarrow.parquet as pq
    from prefect.testing.utilities import prefect_test_harness

    questions = tmp_path / "corpus.jsonl"
    questions.write_text("".join(
        json.dumps({"question": e.question, "answers": e.answers, "answer_type": e.answer_type}) + "\n"
        for e in CORPUS_QUESTIONS
    ))
    run = str(trained_run.root)
    with prefect_test_harness(server_startup_timeout=120):  # evaluate is a flow
        assert main(["evaluate", "--run", run, "--qa", str(questions), "--num-read", "8", "--json"]) == 0
        every = json.loads(capsys.readouterr().out.splitlines()[-1])["corpus"]
        assert main(["evaluate", "--run", run, "--qa", str(questions), "--num-read", "1"]) == 0
        (line,) = [line for line in capsys.readouterr().out.splitlines() if " reader accuracy " in line]
    assert every["n"] == every["n_answer_read"] == len(CORPUS_QUESTIONS)
    assert every["reader_accuracy"] == every["em"]
    # No calibrator: the probabilities shown are the reader's own, and every question is answered.
    assert every["calibrated"] is False and every["ece"] == every["ece_uncalibrated"]
    assert (every["coverage"], every["em_answered"]) == (1.0, every["em"])
    rows = pq.read_table(trained_run.predictions_file("corpus")).to_pylist()
    read = [r["exact_match"] for r in rows if r["answer_rank"] is not None and r["answer_rank"] < 1]
    accuracy = "-" if not read else f"{sum(read) / len(read):.3f}"
    assert f" reader accuracy {accuracy} of {len(read)} " in line, line
