import re
from pathlib import Path

import pytest

import realm.flows.realm_pretrain
from realm.cli.main import main
from tests.model.corpus_fixture import CORPUS_QUESTIONS, write_corpus


def _refused(argv: list[str], pattern: str, capsys) -> None:
    """The command exits 2 with one line on stderr matching `pattern`, nothing on stdout."""
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and re.search(pattern, captured.err), captured.err
    assert "Traceback" not in captured.err and captured.out == ""


def test_train_param_overrides_are_typed_like_the_ui_form(monkeypatch, tmp_path, capsys):
    seen = {}
    monkeypatch.setattr(realm.flows.realm_pretrain, "realm_pretrain", lambda run, params: seen.update(params=params) or {})
    main(["train", "pretrain", "--output", str(tmp_path), "--steps", "7",
          "--param", "cached_doc_embeddings=true", "--param", "learning_rate=3e-5", "--param", "eval_every=50"])
    params = seen["params"]
    assert (params.steps, params.cached_doc_embeddings, params.learning_rate, params.eval_every) == (7, True, 3e-5, 50)


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
    assert main(["reproduce", "--qa_train", str(questions), "--json"]) == 0
    defaults = ReproduceParams(qa_train=[str(questions)])
    assert seen[0] == defaults and (seen[0].output, seen[0].seeds) == ("runs/reproduce", 1)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "| the table |"
    assert json.loads(out[-1])["bm25"]["nq"]["seeds"] == [3]
    assert main(["reproduce", "--qa_train", str(questions), "--output", "elsewhere", "--seed", "2", "--seeds", "2",
                 "--size", "tiny"]) == 0
    assert (seen[1].output, seen[1].seed, seen[1].seeds, seen[1].size) == ("elsewhere", 2, 2, "tiny")


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("nope=1", "FIELD one of"), ("eval_every=abc", "valid integer"), ("steps", "expected FIELD=VALUE"),
        # refused before any work, not passed on to fail mid-stage
        ("learning_rate=Infinity", "finite number"), ("eval_every=0", "greater than or equal to 1"),
        ("max_block_wordpieces=1000", "less than or equal to 288"),
    ],
)
def test_bad_train_params_stop_with_the_field_and_the_reason(assignment, message, tmp_path, capsys):
    _refused(["train", "pretrain", "--output", str(tmp_path), "--param", assignment], message, capsys)


def test_every_run_and_model_preset_is_offered_and_the_model_preset_overrides_the_run_presets(monkeypatch, tmp_path, capsys):
    from typing import get_args

    import realm.flows.finetune_openqa
    from realm.flows.params import ModelPreset
    from realm.model.networks.config import PRESETS

    assert set(get_args(ModelPreset)) == set(PRESETS)
    seen = {}
    monkeypatch.setattr(
        realm.flows.finetune_openqa, "finetune_openqa", lambda run, params: seen.update(run=run, params=params) or {}
    )
    main(["train", "finetune", "--preset", "gpu", "--model_preset", "fast", "--output", str(tmp_path)])
    assert seen["run"].model_preset == "fast" and seen["params"].batch_size == 32  # the gpu preset's
    _refused(["train", "finetune", "--output", str(tmp_path), "--steps", "10"], "sized in epochs", capsys)


@pytest.mark.parametrize(
    "command",
    [[], ["prepare"], ["run"], ["train", "finetune"], ["evaluate"], ["compare"], ["reproduce"], ["ask"], ["serve"],
     ["info"], ["index"]],
)
def test_every_commands_help_prints_and_exits_zero(command, capsys):
    # argparse expands help strings with %: a bare "95%" once made `realm --help` a traceback.
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0 and "usage: realm" in capsys.readouterr().out


def test_what_a_user_can_fix_is_one_line_and_a_non_zero_exit(tmp_path, capsys):
    assert main(["ask", "--run", str(tmp_path / "nowhere"), "who was the commander of apollo 11"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nowhere: no such directory" in err and "Traceback" not in err
    _refused(["ask", "--run", str(tmp_path), "   "], "^realm ask: the question is empty$", capsys)
    with pytest.raises(FileNotFoundError, match="no such directory"):
        main(["--debug", "ask", "--run", str(tmp_path / "nowhere"), "who"])
    from realm.model.publish import record_files
    from realm.schemas import MASKED_SPAN_OUTCOMES, write_table

    write_table(str(tmp_path / "empty" / "masked_spans" / "held_out.parquet"), [], MASKED_SPAN_OUTCOMES)
    record_files(tmp_path / "empty" / "masked_spans", ["held_out.parquet"])
    _refused(["compare", str(tmp_path / "empty")], "^realm compare: masked_spans/held_out: .* holds no examples", capsys)
    _refused(["compare", f"{tmp_path / 'empty'},{tmp_path}", str(tmp_path / "empty")],
             r"^realm compare: every system needs as many seeds as the first \(2\)", capsys)
    _refused(["compare", f"{tmp_path / 'empty'},", str(tmp_path)], "^realm compare: an empty run name in .* stray comma", capsys)
    # Datasets asked for of runs that were only pre-trained: their masked spans would not answer it.
    assert main(["compare", str(tmp_path / "empty"), "--datasets", "nq,wq,ct"]) == 2
    assert re.fullmatch(r"realm compare: .*empty/predictions: no predictions \(run `realm evaluate .*\n", capsys.readouterr().err)
    with pytest.raises(SystemExit):
        main(["compare", str(tmp_path / "empty"), "--datasets", "nq,,ct"])
    assert "an empty dataset name in 'nq,,ct'" in capsys.readouterr().err
    missing = str(tmp_path / "dumps" / "*.xml")
    assert main(["prepare", "--corpus", "wikipedia-xml", "--input", missing, "--output", str(tmp_path / "run")]) == 2
    assert capsys.readouterr().err == (
        f"realm prepare: --input {missing}: no file matches it; {tmp_path / 'run'} is unchanged\n"
    )


def test_a_bad_question_file_or_setting_stops_the_command_in_one_line_before_any_prefect_server(tmp_path, capsys, monkeypatch):
    from realm.cli import prefect_server

    def no_server():
        raise AssertionError("a Prefect server was started for a command that cannot run")

    monkeypatch.setattr(prefect_server, "install", no_server)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "who", "answers": ["me"]}\n{"question": "no answers"}\n')
    good = tmp_path / "good.jsonl"
    good.write_text('{"question": "who", "answers": ["me"]}\n')
    commands = [
        (["evaluate", "--run", str(tmp_path), "--qa", str(bad)], f"realm evaluate: {bad}:2: answers must be"),
        (["train", "finetune", "--output", str(tmp_path), "--qa", str(tmp_path / "missing.jsonl")],
         f"realm train: {tmp_path / 'missing.jsonl'}: no such question file"),
        (["reproduce", "--output", str(tmp_path), "--qa_train", str(bad)], f"realm reproduce: {bad}:2: answers must be"),
        (["reproduce", "--output", str(tmp_path), "--qa_train", str(good), "--systems", "stale_index"],
         "realm reproduce: system stale_index repeats realm"),
    ]
    for argv, message in commands:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(message) and err.count("\n") == 1, err
    with pytest.raises(SystemExit):
        main(["ask", "--run", str(tmp_path), "--num_read", "0", "who"])
    assert "--num_read: must be at least 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["reproduce", "--output", str(tmp_path), "--qa_train", str(good), "--seeds", "0"])
    assert "--seeds: must be at least 1, got 0" in capsys.readouterr().err


def test_an_error_is_one_line_with_no_library_noise_before_it(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "realm.cli.main", "ask", "--run", str(tmp_path), "who"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"realm ask: {tmp_path}: not a trained run (no checkpoints/finetune/; fine-tune it first)\n"


def test_answering_reads_the_prepared_entities_and_never_loads_spacy(trained_run):
    import subprocess
    import sys

    script = (
        "import sys; from realm.cli.main import main; "
        f"code = main(['ask', '--run', {str(trained_run.root)!r}, 'Where does the Nile flow?']); "
        "print('spacy loaded' if 'spacy' in sys.modules else 'no spacy', code)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.stdout.splitlines()[-1] == "no spacy 0", done.stderr


def test_a_question_or_address_that_cannot_serve_is_refused_in_one_line(trained_run, capsys):
    import socket

    for question, why in (("\u200b", "the question has no word the model reads"),
                          ("caf\udce9 paris", "the question is not UTF-8 text")):  # undecodable argv bytes
        _refused(["ask", "--run", str(trained_run.root), question], f"^realm ask: {why}$", capsys)
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--run", str(trained_run.root), "--port", "70000"])
    assert exit_.value.code == 2 and "argument --port: '70000' is not a port (0-65535)" in capsys.readouterr().err
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        _refused(["serve", "--run", str(trained_run.root), "--port", str(port)],
                 f"^realm serve: cannot listen on 127.0.0.1:{port}: Address already in use$", capsys)
    assert "serving" not in capsys.readouterr().out


def test_the_address_check_binds_as_the_server_does():
    # IPv6 sockets IPv6-only, as asyncio binds them: "::" is free while IPv4's wildcard is taken.
    import socket

    from realm.cli.main import _check_can_listen

    try:
        socket.socket(socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 sockets on this machine")
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        _check_can_listen("::", port)
        with pytest.raises(SystemExit, match="Address already in use"):
            _check_can_listen("0.0.0.0", port)


def test_realm_index_then_ask_from_the_other_corpus(trained_run, blocks_table, block_entities_table, tmp_path, capsys):
    write_corpus(str(tmp_path / "nile" / "blocks"), blocks_table.slice(5, 1), block_entities_table)  # the Nile's block
    assert main(["index", "--run", str(trained_run.root), "--corpus", str(tmp_path / "nile"), "--name", "nile"]) == 0
    out = capsys.readouterr().out
    assert "corpus 'nile' version 0: 1 blocks (1 embedded, 0 unchanged, 0 dropped)" in out
    assert main(["ask", "--run", str(trained_run.root), "--index", "nile", "--evidence", "5", "Where does the Nile flow?"]) == 0
    evidence = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    assert len(evidence) == 1 and evidence[0].startswith("  1. [1.000] Nile: The Nile is a river in Africa")
    assert main(["ask", "--run", str(trained_run.root), "--index", "other", "who"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no corpus 'other' indexed for this run" in err
    _refused(["index", "--run", str(trained_run.root), "--corpus", str(tmp_path / "nile"), "--name", "../x"],
             "^realm index: .*must be letters, digits", capsys)
    from realm.schemas.writer_lock import writer_lock

    with writer_lock(trained_run.root / "corpora" / "nile", "corpus 'nile'"):
        _refused(["index", "--run", str(trained_run.root), "--corpus", str(tmp_path / "nile"), "--name", "nile"],
                 "^realm index: .*another writer holds corpus 'nile' now; run again when it ends$", capsys)


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
        assert main(["evaluate", "--run", run, "--qa", str(questions), "--num_read", "8", "--json"]) == 0
        every = json.loads(capsys.readouterr().out.splitlines()[-1])["corpus"]
        assert main(["evaluate", "--run", run, "--qa", str(questions), "--num_read", "1"]) == 0
        line = capsys.readouterr().out.splitlines()[-1]
    assert every["n"] == every["n_answer_read"] == len(CORPUS_QUESTIONS)
    assert every["reader_accuracy"] == every["em"]
    rows = pq.read_table(trained_run.predictions_file("corpus")).to_pylist()
    read = [r["exact_match"] for r in rows if r["answer_rank"] is not None and r["answer_rank"] < 1]
    accuracy = "-" if not read else f"{sum(read) / len(read):.3f}"
    assert f" reader accuracy {accuracy} of {len(read)} " in line, line


def test_realm_info_shows_stages_what_answers_and_each_indexs_lineage(trained_run, capsys):

    from realm.cli.run_info import run_info
    from realm.model.index.lineage import corpus_fingerprint, doc_tower_fingerprint
    from realm.model.networks.checkpoint import load_components, save_checkpoint

    main(["index", "--run", str(trained_run.root), "--corpus", str(trained_run.root), "--name", "copy"])
    capsys.readouterr()
    info = run_info(trained_run.root)
    assert info["stages"] == {"ict": None, "pretrain": None, "warmup": None, "finetune": {"steps": [4]}}
    assert info["answers_with"] == {"checkpoint": "checkpoints/finetune/4", "index": "index/0"}
    # As fine-tuning saves them: the best checkpoint first, then the regular one recording it.
    finetune = Path(trained_run.checkpoints("finetune"))
    components = load_components(finetune / "4")
    save_checkpoint(finetune / "best", 6, components, extra={"best": None})
    save_checkpoint(finetune, 6, components, extra={"best": {"step": 6, "exact_match": 0.25}})
    info = run_info(trained_run.root)
    assert info["stages"]["finetune"] == {"steps": [4, 6], "best": {"step": 6, "validation_exact_match": 0.25}}
    assert info["answers_with"]["checkpoint"] == "checkpoints/finetune/best/6"
    assert list(info["indexes"]) == ["index/0", "corpora/copy/index/0"]
    tower = doc_tower_fingerprint(trained_run.snapshots / "0", 0)
    ids = [-7, 11, 23, -42, 57, 68, 9001, -3]  # the test corpus's blocks
    for lineage in (info["indexes"]["index/0"]["lineage"], info["indexes"]["corpora/copy/index/0"]["lineage"]):
        assert (lineage["doc_tower"], lineage["corpus"], lineage["max_block_wordpieces"]) == (tower, corpus_fingerprint(ids), 64)

    assert main(["info", "--run", str(trained_run.root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"run {trained_run.root} (model preset tiny)"
    assert "  finetune  steps 4, 6; best 6 (validation EM 0.250)" in out
    assert "answers with: checkpoints/finetune/best/6 over index/0" in out
    assert any(line.startswith("  corpora/copy/index/0     flat, 8 blocks: doc tower step 0") and line.endswith(
        "8 embedded, 0 reused, 0 dropped") for line in out)
    assert main(["info", "--run", str(trained_run.root / "nowhere")]) == 2


def test_realm_info_reports_what_is_damaged_beside_the_rest(trained_run, capsys):
    import shutil

    from realm.cli.run_info import run_info

    finetune = Path(trained_run.checkpoints("finetune"))
    shutil.copytree(finetune / "4", finetune / "best" / "4")
    state = finetune / "4" / "training_state.pt"
    state.write_bytes(state.read_bytes()[:100])  # cut short
    (trained_run.root / "summary").mkdir()
    (trained_run.root / "summary" / "prepare.json").write_text('{"chunk": {"documents": 3}}')  # Beam kept no blocks
    (trained_run.root / "corpora" / ".snapshot").mkdir(parents=True)  # not a corpus realm made
    (Path(trained_run.index) / "0" / "manifest.json").write_text("{")

    info = run_info(trained_run.root)
    assert info["stages"]["finetune"] == {
        "steps": [], "best": {"step": 4, "validation_exact_match": None},
        "damaged": {"4": f"{state}: size 100, manifest.json says {(finetune / 'best' / '4' / 'training_state.pt').stat().st_size}"},
    }
    assert info["indexes"]["index/0"]["damaged"].startswith(f"{trained_run.index}/0/manifest.json: does not parse")
    assert info["answers_with"] == {"checkpoint": "checkpoints/finetune/best/4", "index": "index/0"}
    assert main(["info", "--run", str(trained_run.root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "prepare: 0 blocks from 3 documents, 0 pre-training examples, 0 ICT examples" in out
    assert "  finetune  steps none intact; best 4" in out
    assert f"            damaged 4: {state}: size 100" in "\n".join(out)
    assert any(line.startswith("  index/0                  damaged: ") for line in out)

    shutil.rmtree(finetune / "best")  # the damaged step alone: named, not "fine-tune it first"
    (trained_run.root / "summary" / "prepare.json").write_text("{")
    info = run_info(trained_run.root)
    assert info["answers_with"]["missing"] == (
        f"{state}: size 100, manifest.json says {info['stages']['finetune']['damaged']['4'].split('says ')[1]}; "
        f"no fine-tuned checkpoint of {trained_run.root} is intact: restore it, or fine-tune again"
    )
    assert info["prepare"]["damaged"].startswith(f"{trained_run.root}/summary/prepare.json: does not parse")


def test_realm_info_shows_the_lineage_of_an_index_in_another_run(trained_run, tmp_path):
    # As a reproduction's systems answer from the base run's index.
    import shutil

    from realm.cli.run_info import run_info
    from realm.model.networks.checkpoint import load_components, save_checkpoint

    elsewhere = tmp_path / "base" / "index" / "0"
    shutil.copytree(Path(trained_run.index) / "0", elsewhere)
    finetune = Path(trained_run.checkpoints("finetune"))
    save_checkpoint(finetune, 5, load_components(finetune / "4"), paths={"index": elsewhere})
    info = run_info(trained_run.root)
    assert info["answers_with"] == {"checkpoint": "checkpoints/finetune/5", "index": str(elsewhere)}
    assert info["indexes"][str(elsewhere)] == info["indexes"]["index/0"]


def test_an_exit_code_a_command_raises_passes_through(monkeypatch, tmp_path):
    import realm.cli.main

    def exits(args, extra):
        raise SystemExit(3)

    monkeypatch.setattr(realm.cli.main, "_info", exits)
    with pytest.raises(SystemExit) as exit_:
        main(["info", "--run", str(tmp_path)])
    assert exit_.value.code == 3
