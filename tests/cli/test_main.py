import re

import pytest

from realm.cli.main import main
from tests.cli.refusal import refused


@pytest.mark.parametrize(
    "command",
    [[], ["prepare"], ["run"], ["train", "finetune"], ["evaluate"], ["calibrate"], ["compare"], ["reproduce"], ["ask"],
     ["serve"], ["info"], ["index"]],
)
def test_every_commands_help_prints_and_exits_zero(command, capsys):
    # argparse expands help strings with %: a bare "95%" once made `realm --help` a traceback.
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0 and "usage: realm" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "flag"),
    [(["ask", "--run", "r", "--num_read", "3", "who"], "--num_read"),  # the old underscore spelling
     (["evaluate", "--run", "r", "--num-rea", "3"], "--num-rea"),  # a prefix of a flag
     (["info", "--run", "r", "--runner", "DataflowRunner"], "--runner"),  # a Beam flag where no Beam runs
     (["index", "--run", "r", "--corpus", "c", "--max_block_wordpieces", "128"], "--max_block_wordpieces")],
)
def test_a_flag_a_command_does_not_know_is_refused_by_name(argv, flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2 and re.search(f"unrecognized arguments: {flag}( |$)", capsys.readouterr().err)


def test_what_a_user_can_fix_is_one_line_and_a_non_zero_exit(tmp_path, capsys):
    assert main(["ask", "--run", str(tmp_path / "nowhere"), "who was the commander of apollo 11"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nowhere: no such directory" in err and "Traceback" not in err
    refused(["ask", "--run", str(tmp_path), "   "], "^realm ask: the question is empty$", capsys)
    with pytest.raises(FileNotFoundError, match="no such directory"):
        main(["--debug", "ask", "--run", str(tmp_path / "nowhere"), "who"])
    from realm.model.publish import record_files
    from realm.schemas import MASKED_SPAN_OUTCOMES, write_table

    write_table(str(tmp_path / "empty" / "masked_spans" / "held_out.parquet"), [], MASKED_SPAN_OUTCOMES)
    record_files(tmp_path / "empty" / "masked_spans", ["held_out.parquet"])
    refused(["compare", str(tmp_path / "empty")], "^realm compare: masked_spans/held_out: .* holds no examples", capsys)
    refused(["compare", f"{tmp_path / 'empty'},{tmp_path}", str(tmp_path / "empty")],
            r"^realm compare: every system needs as many seeds as the first \(2\)", capsys)
    refused(["compare", f"{tmp_path / 'empty'},", str(tmp_path)], "^realm compare: an empty run name in .* stray comma", capsys)
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
        (["run", "--output", str(tmp_path), "--qa", str(bad)], f"realm run: {bad}:2: answers must be"),
        (["reproduce", "--output", str(tmp_path), "--qa-train", str(bad)], f"realm reproduce: {bad}:2: answers must be"),
        (["reproduce", "--output", str(tmp_path), "--qa-train", str(good), "--systems", "stale_index"],
         "realm reproduce: system stale_index repeats realm"),
    ]
    for argv, message in commands:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(message) and err.count("\n") == 1, err
    with pytest.raises(SystemExit):
        main(["ask", "--run", str(tmp_path), "--num-read", "0", "who"])
    assert "--num-read: must be at least 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["reproduce", "--output", str(tmp_path), "--qa-train", str(good), "--seeds", "0"])
    assert "--seeds: must be at least 1, got 0" in capsys.readouterr().err


def test_an_error_is_one_line_with_no_library_noise_before_it(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "realm.cli.main", "ask", "--run", str(tmp_path), "who"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"realm ask: {tmp_path}: not a trained run (no checkpoints/finetune/; fine-tune it first)\n"


def test_an_exit_code_a_command_raises_passes_through(monkeypatch, tmp_path):
    import realm.cli.commands.info

    def exits(args):
        raise SystemExit(3)

    monkeypatch.setattr(realm.cli.commands.info, "handle", exits)
    with pytest.raises(SystemExit) as exit_:
        main(["info", "--run", str(tmp_path)])
    assert exit_.value.code == 3
