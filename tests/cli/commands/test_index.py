from realm.cli.main import main
from tests.cli.refusal import refused
from tests.model.corpus_fixture import write_corpus


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
    refused(["index", "--run", str(trained_run.root), "--corpus", str(tmp_path / "nile"), "--name", "../x"],
            "^realm index: .*must be letters, digits", capsys)
    from realm.schemas.writer_lock import writer_lock

    with writer_lock(trained_run.root / "corpora" / "nile", "corpus 'nile'"):
        refused(["index", "--run", str(trained_run.root), "--corpus", str(tmp_path / "nile"), "--name", "nile"],
                "^realm index: .*another writer holds corpus 'nile' now; run again when it ends$", capsys)
