"""`realm calibrate`: fit a trained run's answer-probability calibrator on the questions its
fine-tuning held out for validation (the Prefect flow `realm-calibrate`), without training
again; fine-tuning does it at its end, so this is for runs fine-tuned before it did.

    realm calibrate --run runs/demo
    realm calibrate --run runs/mine --qa my_train.jsonl    # the files the run was fine-tuned on
"""

from __future__ import annotations

import argparse

from realm.cli.options import add_json_option, print_json, read_question_files


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "calibrate", help="calibrate a trained run's answer probabilities on its held-out validation questions"
    )
    parser.add_argument("--run", required=True, help="run root")
    parser.add_argument("--qa", nargs="+", default=[],
                        help="the question files the run was fine-tuned on, in that order (default: the shipped training "
                        "sets); only the questions fine-tuning held out are answered")
    parser.add_argument("--device")
    add_json_option(parser, "end with the calibrator record as one JSON line")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    read_question_files(args.qa)
    from realm.cli import prefect_server
    from realm.flows.calibrate import calibrate, validation_slice
    from realm.flows.demo import training_qa_paths
    from realm.flows.params import RunParams
    from realm.model.networks.presets import current_model_preset
    from realm.model.qa.qa_data import read_qa_file
    from realm.model.qa.trained_run import TrainedRun
    from realm.schemas.run_layout import RunLayout

    trained = TrainedRun.at(args.run)
    try:  # refused in one line before a Prefect server starts
        validation_slice([e for path in args.qa or training_qa_paths() for e in read_qa_file(path)], str(trained.checkpoint))
    except ValueError as error:
        raise SystemExit(f"realm calibrate: {error}") from None
    preset = current_model_preset(RunLayout.at(args.run).model_preset())
    run = RunParams(output=args.run, device=args.device, **({"model_preset": preset} if preset else {}))
    prefect_server.install()
    record = calibrate(run, args.qa)
    if args.json:
        print_json(record)
    elif not record:
        print(f"realm calibrate: no question was held out for validation; {args.run} stays uncalibrated")
    else:
        print(f"calibrated {args.run} ({record['checkpoint']}) on {record['questions']} validation questions "
              f"(EM {record['exact_match']:.3f}): ECE {record['ece_before']:.3f} -> {record['ece_after']:.3f} "
              f"over {record['ece_bins']} equal-width bins; p' = sigmoid({record['slope']:.3f} logit p {record['bias']:+.3f})")
    return 0
