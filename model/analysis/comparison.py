"""Comparing runs example by example: `realm compare RUN_A RUN_B ...`.

Questions: each run's `predictions/<dataset>.parquet` (written by `realm evaluate` through the
PREDICTIONS schema) gives, per dataset the runs share, exact match, reader accuracy (exact
match among the questions with an answer in the blocks read) and recall@5, each with a
percentile-bootstrap 95% interval, and an exact McNemar test of each run against the first on
the questions exactly one of them answers right; the same test of an answer in the top 5, and
exact match split by which of the two runs read an answer (so a retriever that finds harder
questions' answers is told apart from a reader that reads worse). Over all the datasets: each
run's mean EM, its difference from the first run's with a paired bootstrap 95% interval, and
the McNemar test on all the questions. Runs must have answered the same questions (the same
question file), or the comparison is refused naming the dataset (`question_comparison`).

Masked spans: each run's `masked_spans/<examples>.parquet` (pre-training's last evaluation,
MASKED_SPAN_OUTCOMES) gives masked-span accuracy with retrieval and with the null document
alone, with intervals, and the same paired test of accuracy with retrieval against the first
run: e.g. REALM's pre-training against a closed-book one, on the same never-trained-on
examples, and that test again on two parts of them: the examples whose span a block the run
retrieved holds (where copying from the block can help) and the rest (where only reading the
sentence can). Runs must have evaluated the same examples, or the comparison is refused; runs
that link one masked_spans/ directory (fine-tuning roots of one pre-training) compare only their
predictions, where they have them. Where the outcomes list their candidates, a second table
shows where p(z|x) ranks the blocks holding the span and what the marginal makes of the spans
only such a block's reading gets right (`masked_span_comparison.copying_breakdown`).

Every file read is checked against the sizes and sha256 its directory's manifest recorded.
Systems of several seeds compare in `seed_comparison`; the tables are `comparison_markdown`'s.
"""

from __future__ import annotations

from realm.model.analysis.masked_span_comparison import compare_masked_spans
from realm.model.analysis.question_comparison import compare_questions
from realm.model.analysis.run_outcomes import no_predictions, read_results, require_predictions, run_layouts


def compare(run_roots: list[str], datasets: list[str] | None = None) -> dict[str, list[dict]]:
    """{"questions": rows, "overall": rows, "masked_spans": rows}, each where every run has
    that kind of result; refused when they share neither. `datasets` keeps the questions rows,
    and the overall rows' means, to those datasets (`question_outcomes`).

    A questions row per (dataset, run): {dataset, run, n, em, em_low, em_high,
    reader_accuracy, reader_low, reader_high, n_answer_read, recall_at_5, only_this_right,
    only_baseline_right, p_value, recall_at_5_paired, answer_read} (the last five None for the
    baseline; `question_comparison._retrieval_split` says what the last two hold). An overall row
    per run is `question_comparison._overall`'s, over the datasets of the questions rows. A masked-spans row
    per (examples, run): {examples, run, step, n, accuracy_with_retrieval and its interval
    (…_low, …_high), accuracy_null_only and its interval, span_in_candidates, the paired
    three, of accuracy with retrieval against the first run's, `in_retrieved` and
    `not_in_retrieved`: the paired three plus n, on the examples whose span this run's
    retrieved blocks hold and on the rest (None for the baseline), and copying:
    `copying_breakdown`'s dict, None for outcomes written before the candidates were listed};
    left out when the runs share one masked_spans/ directory and have predictions to compare."""
    from realm.schemas import MASKED_SPAN_OUTCOMES, PREDICTIONS

    layouts = run_layouts(run_roots)
    predictions = [read_results(layout.predictions, PREDICTIONS) for layout in layouts]
    masked_spans = [read_results(layout.masked_spans, MASKED_SPAN_OUTCOMES) for layout in layouts]
    found = {}
    if datasets:  # asked for datasets: masked spans alone would not answer
        require_predictions(run_roots, predictions)
    if all(predictions):
        found["questions"], found["overall"] = compare_questions(run_roots, predictions, datasets)
    # Fine-tuning roots made from one pre-training link its masked_spans/: comparing a directory
    # with itself would print a table of ties.
    one_directory = len(layouts) > 1 and len({layout.masked_spans.resolve() for layout in layouts}) == 1
    if all(masked_spans) and not (one_directory and found):
        found["masked_spans"] = compare_masked_spans(run_roots, masked_spans)
    if not found:
        lacking = next((root for root, p, m in zip(run_roots, predictions, masked_spans) if not p and not m), None)
        raise FileNotFoundError(
            f"{no_predictions(lacking)} and no masked_spans/ (pre-training writes them)"
            if lacking is not None else f"the runs {run_roots} share no kind of result: some have only predictions, some only masked_spans"
        )
    return found
