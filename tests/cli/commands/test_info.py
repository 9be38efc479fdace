from pathlib import Path

from realm.cli.main import main


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
    assert out[0] == f"run {trained_run.root} (model preset {trained_run.model_preset()})"
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


def test_realm_info_shows_the_bert_directory_and_its_weights_sha256(tmp_path, capsys):
    import hashlib

    from realm.schemas.run_layout import RunLayout
    from tests.bert_fixture import save_tiny_bert

    bert = save_tiny_bert(tmp_path / "bert")
    layout = RunLayout.at(tmp_path / "run")
    layout.record_model_preset("random-2l", bert_dir=str(bert))
    digest = hashlib.sha256((bert / "model.safetensors").read_bytes()).hexdigest()
    capsys.readouterr()
    assert main(["info", "--run", str(layout.root), "--json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["bert"] == {"dir": str(bert), "weights_sha256": digest}
    assert main(["info", "--run", str(layout.root)]) == 0
    assert f"bert: {bert} (weights sha256 {digest})" in capsys.readouterr().out.splitlines()
