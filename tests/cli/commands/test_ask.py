from realm.cli.main import build_parser
from tests.cli.refusal import refused


def test_ask_and_the_http_api_show_as_much_evidence_and_read_as_many_blocks_by_default():
    from realm.cli.http_app import AskRequest

    args = build_parser().parse_args(["ask", "--run", "runs/x", "who"])
    assert (args.evidence, args.num_read) == (AskRequest(question="who").evidence, AskRequest(question="who").num_read)


def test_a_question_the_model_cannot_read_is_refused_in_one_line(trained_run, capsys):
    for question, why in (("\u200b", "the question has no word the model reads"),
                          ("caf\udce9 paris", "the question is not UTF-8 text")):  # undecodable argv bytes
        refused(["ask", "--run", str(trained_run.root), question], f"^realm ask: {why}$", capsys)


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


def test_below_the_minimum_confidence_ask_gives_no_answer_and_still_shows_the_evidence(trained_run, capsys):
    from realm.cli.main import main

    question = "Where does the Nile flow?"
    assert main(["ask", "--run", str(trained_run.root), question]) == 0
    answered = capsys.readouterr().out.splitlines()
    shown = float(answered[0].rsplit("(p = ", 1)[1].rstrip(")"))  # within 0.0005 of the probability
    assert answered[0].startswith("answer: ") and sum("<- the answer" in line for line in answered) == 1

    above = round(shown + 0.001, 3)
    assert main(["ask", "--run", str(trained_run.root), "--min-confidence", str(above), question]) == 0
    withheld = capsys.readouterr().out.splitlines()
    assert withheld[0] == f"no answer: p = {shown:.3f} is below --min-confidence {above:g}"
    assert [line.removesuffix("  <- the answer") for line in answered[1:]] == withheld[1:]

    below = max(0.0, round(shown - 0.001, 3))
    assert main(["ask", "--run", str(trained_run.root), "--min-confidence", str(below), question]) == 0
    assert capsys.readouterr().out.splitlines() == answered
