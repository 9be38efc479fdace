"""`realm evaluate`: exact match, reader accuracy and answer recall@k of a trained run (the Prefect
flow `realm-evaluate`), per dataset, with the calibration error of its answers' probabilities and
the exact match of its most confident answers.

    realm evaluate --run runs/demo                          # the demo set and the shipped held-out tenths
    realm evaluate --run runs/demo --qa nq.dev.jsonl --json
    realm evaluate --run runs/demo --min-confidence 0.3     # the share answered at p >= 0.3, and their EM
"""

from __future__ import annotations

import argparse

from realm.cli.answering import NUM_READ
from realm.cli.options import (
    add_index_option, add_json_option, add_min_confidence_option, positive_int, print_json, read_question_files,
)


def add_parser(commands) -> None:
    parser = commands.add_parser("evaluate", help="exact match and recall@k of a trained run on QA files")
    parser.add_argument("--run", required=True, help="run root")
    parser.add_argument("--qa", nargs="+", default=[],
                        help="JSONL / NQ-open JSONL / WebQuestions JSON / CuratedTrec TSV (default: the demo set and the "
                        "shipped held-out tenths)")
    add_json_option(parser, 'end with one JSON line {"<dataset>": {"em", "reader_accuracy", "n_answer_read", '
                    '"recall_at_5", "n", "ece", "ece_uncalibrated", "calibrated", "coverage", "em_answered", '
                    '"em_at_coverage"}}')
    parser.add_argument("--num-read", type=positive_int, default=NUM_READ, help="blocks the reader reads (default: %(default)s)")
    add_min_confidence_option(parser, "count answers below probability P as not given: the share answered and their EM")
    parser.add_argument("--device")
    add_index_option(parser)
    parser.set_defaults(handler=handle)


def evaluation_settings(args: argparse.Namespace):
    """The flow's (RunParams, EvaluateParams): the run's recorded model preset, the question
    files named (none: the flow's default sets, `realm.flows.evaluate.question_files`)."""
    from realm.model.networks.presets import current_model_preset
    from realm.flows.params import EvaluateParams, RunParams
    from realm.schemas.run_layout import RunLayout

    preset = current_model_preset(RunLayout.at(args.run).model_preset())
    run = RunParams(output=args.run, device=args.device, **({"model_preset": preset} if preset else {}))
    return run, EvaluateParams(qa=args.qa, num_read=args.num_read, min_confidence=args.min_confidence)


def handle(args: argparse.Namespace) -> int:
    read_question_files(args.qa)
    run, params = evaluation_settings(args)
    from realm.cli import prefect_server
    from realm.flows.evaluate import evaluate, share_text

    prefect_server.install()
    metrics = evaluate(run, params, corpus=args.index)
    if args.json:
        keys = ("em", "reader_accuracy", "n_answer_read", "recall_at_5", "n", "ece", "ece_uncalibrated", "calibrated",
                "coverage", "em_answered", "em_at_coverage")
        print_json({d: {key: m[key] for key in keys} for d, m in metrics.items()})
        return 0
    for dataset, m in metrics.items():
        print(f"{dataset:<10} n={m['n']:<5} EM {m['em']:.3f}  reader accuracy {share_text(m['reader_accuracy'])} "
              f"of {m['n_answer_read']}  "
              f"recall@1 {m['recall_at_1']:.3f}  recall@5 {m['recall_at_5']:.3f}  recall@20 {m['recall_at_20']:.3f}")
    if metrics:
        print_confidence(metrics, args.min_confidence, args.run)
    return 0


def print_confidence(metrics: dict[str, dict], min_confidence: float, run: str) -> None:
    """Each dataset's calibration error and the exact match of its most confident answers."""
    from realm.flows.evaluate import share_text

    first = next(iter(metrics.values()))
    state = "calibrated" if first["calibrated"] else f"uncalibrated (realm calibrate --run {run} calibrates them)"
    print(f"\nprobabilities {state}; ECE over 10 equal-width bins; EM of the most confident share of the answers; "
          f"the share answered at p >= {min_confidence:g} and their EM")
    print(f"{'dataset':<10} {'ECE':>6} {'uncal.':>6}  " + " ".join(f"{float(c):>5.0%}" for c in first["em_at_coverage"])
          + f"  {'answered':>8} {'EM':>6}")
    for dataset, m in metrics.items():
        print(f"{dataset:<10} {m['ece']:>6.3f} {m['ece_uncalibrated']:>6.3f}  "
              + " ".join(f"{em:>5.3f}" for em in m["em_at_coverage"].values())
              + f"  {m['coverage']:>8.3f} {share_text(m['em_answered']):>6}")
