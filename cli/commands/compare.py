"""`realm compare`: evaluated or pre-trained runs side by side, with bootstrap 95% intervals and
paired tests against the first.

    realm compare runs/orqa runs/realm --datasets nq,wq,ct
"""

from __future__ import annotations

import argparse

from realm.cli.options import add_json_option, dataset_names, print_json

DESCRIPTION = (
    "Reads each run's predictions/ (written by `realm evaluate`) and masked_spans/ (written by pre-training's last "
    "evaluation), whichever every run has; the first run is the baseline the others are tested against (exact McNemar "
    "test on the questions, or masked spans, one gets right and the other wrong). For masked spans it also shows where "
    "p(z|x) ranked the retrieved blocks holding each span, and what the marginal made of the spans only such a block's "
    "reading gets right. Systems trained on several seeds are named as their runs joined by commas "
    "(runs/orqa,runs/orqa_s1 runs/realm,runs/realm_s1; so a run's path cannot hold one), paired seed by seed in the "
    "order given for the summed right-only counts: their mean EM over the seeds, its difference from the first "
    "system's with a bootstrap 95%% interval over the questions, and a sign-flip test of it, both on each question's "
    "seed-averaged outcomes."
)


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "compare", description=DESCRIPTION,
        help="EM (or masked-span accuracy) with bootstrap 95%% intervals and paired tests of runs on the same examples",
    )
    parser.add_argument("runs", nargs="+", help="run roots, baseline first (a system's seeds: runs joined by commas)")
    add_json_option(parser, 'print {"questions": rows, "overall": rows, "masked_spans": rows} (those every run has), '
                    'or {"over_seeds": rows}, as one JSON line')
    parser.add_argument("--datasets", type=dataset_names, metavar="NAME,NAME",
                        help="compare the questions of these datasets only, and average EM over them (nq,wq,ct: the "
                        "three dev sets' mean, without the demo set); default: every dataset all the runs evaluated")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from realm.model.analysis.comparison import compare
    from realm.model.analysis.comparison_markdown import comparison_markdown, seeds_markdown
    from realm.model.analysis.seed_comparison import compare_seeds
    from realm.schemas import ArtifactError

    systems = [system.split(",") for system in args.runs]
    if any("" in runs for runs in systems):
        raise SystemExit(f"realm compare: an empty run name in {' '.join(args.runs)!r} (a stray comma?)")
    seeded = any(len(runs) > 1 for runs in systems)
    try:
        found = compare_seeds(systems, args.datasets) if seeded else compare(args.runs, args.datasets)
    except ArtifactError:
        raise  # main's one line for a damaged file
    except ValueError as error:  # runs that evaluated other questions or examples, an empty set
        raise SystemExit(f"realm compare: {error}") from None
    if args.json:
        print_json(found)
    else:
        print(seeds_markdown(found, systems) if seeded else comparison_markdown(found, args.runs))
    return 0
