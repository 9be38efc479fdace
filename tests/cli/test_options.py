import pytest

from realm.cli.main import build_parser


def test_a_beam_flag_before_the_double_dash_is_refused_by_name(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["prepare", "--corpus", "vital", "--output", "o", "--runner", "X", "--", "--project", "P"])
    assert exit_.value.code == 2 and "unrecognized arguments: --runner X" in capsys.readouterr().err


def test_a_double_dash_keeps_its_usual_meaning_for_commands_that_launch_no_beam():
    args = build_parser().parse_args(["ask", "--run", "r", "--", "-5 degrees: where?"])
    assert args.question == "-5 degrees: where?"
