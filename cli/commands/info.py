"""`realm info`: what a run folder holds: stages, checkpoints, what answers, every index's lineage.

    realm info --run runs/demo
"""

from __future__ import annotations

import argparse

from realm.cli.options import add_json_option, print_json


def add_parser(commands) -> None:
    parser = commands.add_parser("info", help="what a run folder holds: stages, checkpoints, indexes and their lineage")
    parser.add_argument("--run", required=True, help="run root")
    add_json_option(parser, "print it as one JSON line")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from realm.cli.run_info import format_info, run_info

    info = run_info(args.run)
    if args.json:
        print_json(info)
    else:
        print(format_info(info))
    return 0
