from realm.cli.main import build_parser


def test_beam_flags_after_a_double_dash_or_in_beam_args_reach_the_pipelines_argv_in_order():
    from realm.cli.commands.prepare import pipeline_argv

    args = build_parser().parse_args([
        "prepare", "--corpus", "wikipedia-xml", "--input", "dumps/*.xml", "--output", "runs/w",
        "--knowledge-blocks", "runs/k/blocks", "--beam-args", "--runner DataflowRunner --project 'my project'",
        "--", "--region", "europe-west1", "--limit", "7",  # after --, even a realm flag's name is Beam's
    ])
    assert pipeline_argv(args) == [
        "--corpus", "wikipedia-xml", "--output", "runs/w", "--input", "dumps/*.xml", "--knowledge_blocks", "runs/k/blocks",
        "--runner", "DataflowRunner", "--project", "my project", "--region", "europe-west1", "--limit", "7",
    ]
    assert build_parser().parse_args(["prepare", "--corpus", "vital", "--output", "o"]).beam_args == []


def test_bert_becomes_the_pipelines_model_dir_checked_first(tmp_path, capsys):
    from realm.cli.commands.prepare import pipeline_argv
    from tests.bert_fixture import save_tiny_bert
    from tests.cli.refusal import refused

    bert = save_tiny_bert(tmp_path / "bert")
    args = build_parser().parse_args(["prepare", "--corpus", "vital", "--output", "o", "--bert", str(bert)])
    assert pipeline_argv(args)[-2:] == ["--model_dir", str(bert)]
    (bert / "vocab.txt").unlink()
    refused(["prepare", "--corpus", "vital", "--output", str(tmp_path / "o"), "--bert", str(bert)],
            r"^realm prepare: --bert .*bert: no vocab.txt or tokenizer.json \(the WordPiece vocabulary\)$", capsys)
