from pathlib import Path

from realm.cli.main import main


def test_reproduce_leaves_each_unset_option_at_the_parameters_default_and_prints_its_table(monkeypatch, tmp_path, capsys):
    import json

    import realm.flows.reproduce
    from realm.flows.reproduce_systems import ReproduceParams

    questions = tmp_path / "nq.train.jsonl"
    questions.write_text('{"question": "who", "answers": ["me"]}\n')
    row = {"system": "bm25", "dataset": "nq", "n": 1, "exact_match": 1.0, "reader_accuracy": 1.0, "recall_at_5": 1.0,
           "zero_shot_recall_at_5": 0.0, "train_seconds": 60.0, "seed": 3}
    seen = []

    def reproduce(params):
        seen.append(params)
        Path(params.output).mkdir(parents=True, exist_ok=True)
        (Path(params.output) / "results.md").write_text("| the table |\n")
        return [row]

    monkeypatch.setattr(realm.flows.reproduce, "realm_reproduce", reproduce)
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "--qa-train", str(questions), "--json"]) == 0
    defaults = ReproduceParams(qa_train=[str(questions)])
    assert seen[0] == defaults and (seen[0].output, seen[0].seeds) == ("runs/reproduce", 1)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "| the table |"
    assert json.loads(out[-1])["bm25"]["nq"]["seeds"] == [3]
    assert main(["reproduce", "--qa-train", str(questions), "--output", "elsewhere", "--seed", "2", "--seeds", "2",
                 "--preset", "tiny"]) == 0
    assert (seen[1].output, seen[1].seed, seen[1].seeds, seen[1].preset) == ("elsewhere", 2, 2, "tiny")


def test_a_param_overrides_the_presets_stages_and_lets_the_rows_it_tells_apart_run(monkeypatch, tmp_path, capsys):
    """At the default preset the doc vectors are cached, so stale_index would repeat realm; with
    both towers learning it is a row of its own."""
    import realm.flows.reproduce

    questions = tmp_path / "nq.train.jsonl"
    questions.write_text('{"question": "who", "answers": ["me"]}\n')
    seen = []

    def reproduce(params):
        seen.append(params)
        Path(params.output).mkdir(parents=True, exist_ok=True)
        (Path(params.output) / "results.md").write_text("| the table |\n")
        return []

    monkeypatch.setattr(realm.flows.reproduce, "realm_reproduce", reproduce)
    monkeypatch.chdir(tmp_path)
    argv = ["reproduce", "--qa-train", str(questions), "--systems", "orqa", "stale_index"]
    assert main(argv + ["--param", "pretrain.doc_tower=whole", "--param", "finetune.epochs=2"]) == 0
    stages = seen[0].effective_stages()
    assert (stages.pretrain.doc_tower, stages.pretrain.steps, stages.finetune.epochs) == ("whole", 1000, 2.0)
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("realm reproduce: system stale_index repeats realm")
    assert main(argv + ["--param", "pretrain.nothing=1"]) == 2
    assert "--param 'pretrain.nothing=1': expected pretrain.FIELD=VALUE" in capsys.readouterr().err
