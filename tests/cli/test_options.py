import pytest

from realm.cli.main import build_parser


def test_a_beam_flag_before_the_double_dash_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["prepare", "--corpus", "vital", "--output", "o", "--runner", "X", "--", "--project", "P"])
    assert exit_.value.code == 2 and "unrecognized arguments: --runner X" in capsys.readouterr().err


def test_a_double_dash_keeps_its_usual_meaning_for_commands_that_launch_no_beam():
    args = build_parser().parse_args(["ask", "--run", "r", "--", "-5 degrees: where?"])
    assert args.question == "-5 degrees: where?"


@pytest.mark.parametrize("command", [["ask", "--run", "r", "q"], ["evaluate", "--run", "r"]])
def test_min_confidence_is_a_probability_and_defaults_to_answering_every_question(command, capsys):
    from realm.model.qa.risk_coverage import MIN_CONFIDENCE

    assert build_parser().parse_args(command).min_confidence == MIN_CONFIDENCE
    assert build_parser().parse_args([*command, "--min-confidence", "0.35"]).min_confidence == 0.35
    for value in ("1.5", "-0.1", "nan"):
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args([*command, "--min-confidence", value])
        assert exit_.value.code == 2
        assert f"--min-confidence: must be a probability between 0 and 1, got {value}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build_parser().parse_args([*command, "--min_confidence", "0.3"])  # one spelling: hyphens
