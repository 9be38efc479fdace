"""The `realm` command: one entry point over the Beam pipelines and the Prefect flows.

    realm prepare --corpus vital --output runs/vital
    realm run --preset tiny --output runs/tiny
    realm ask --run runs/tiny "who was the commander of apollo 11"
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import TYPE_CHECKING, get_args

from pydantic import ValidationError

from realm.flows.params import ModelPreset, RunPreset

if TYPE_CHECKING:
    from realm.flows.reproduce_systems import ReproduceParams

# The ephemeral Prefect server's telemetry writes race the first flow run for the SQLite lock
# ("database is locked" tracebacks), and there is no network to send it to anyway.
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

# The commands that run Prefect flows, and so may start Prefect's temporary server.
FLOW_COMMANDS = {"run", "train", "evaluate", "reproduce"}

# The question `realm run` answers at its end, with its evidence (a demo question: never trained on).
EXAMPLE_QUESTION = "who was the commander of apollo 11"

DESCRIPTION = """\
REALM: retrieval-augmented language model pre-training, as a data pipeline.

prepare   Beam: read a corpus and build the Parquet artifacts training needs:
            read      documents/          the corpus as (doc_id, title, text, url, date)
            chunk     blocks/             <= 288-wordpiece retrieval blocks ([CLS] title [SEP] body [SEP])
            entities  block_entities/     each block's named entities (spaCy NER), the reader's entity-type input
            salient   pretrain_examples/  one sentence per example, salient spans (spaCy NER + dates)
            trivial   pretrain_examples/  forbidden_block_ids: every block holding the sentence verbatim
            ict       ict_examples/       Inverse Cloze Task pairs to warm-start the retriever
          Rejected records go to dead_letter/ (stage, key, reason); each stage's counts show
          on stderr while it runs and print as a table at the end.
run       Prefect: the whole chain on one run root (prepare, then the stages below).
train     Prefect, one stage at a time:
            ict       warm-start both retriever towers on the Inverse Cloze Task
            pretrain  REALM pre-training: salient-span MLM over the top-k retrieved blocks
                      (null document included, trivial retrievals excluded), with the
                      MIPS index re-embedded and swapped in asynchronously every N steps
            warmup    the reader's span-selection warm-up on cloze questions from the corpus
                      (a salient span becomes a wh-word; the sentence's own blocks never retrieved)
            finetune  Open-QA: query tower + span reader over the top 5 blocks, index fixed
                      (one softmax over every span of the read blocks, best validated checkpoint kept)
evaluate  Prefect: exact match, reader accuracy and answer recall@1/5/20 per dataset; predictions/ Parquet.
compare   evaluated or pre-trained runs side by side: bootstrap 95% intervals and paired tests
          against the first (answers to questions; masked spans of the same pre-training examples).
reproduce Prefect: REALM vs ICT-only (ORQA) vs BM25 + reader and the paper's ablations,
          trained and evaluated on one corpus and question set; a table, a chart, Parquet.
ask       answer a question with a trained run, showing the evidence blocks.
serve     the same over HTTP: POST /ask, GET /blocks/{id}, GET /health, and a web page at /.
info      what a run folder holds: stages, checkpoints, what answers, every index's lineage.
index     index another prepared corpus with a trained run's doc tower (ask/serve/evaluate --index NAME
          answer from it); indexing a name again re-embeds only the blocks that changed.
"""

PREPARE_EPILOG = """\
Corpora (--corpus):
  vital          the embedded default: ~10k Wikipedia vital-article summaries (no --input)
  wikipedia-xml  MediaWiki XML export dumps, *.xml or *.xml.bz2 (streamed)
  wikiextractor  WikiExtractor --json output (JSON lines id/url/title/text)
  ccnews-jsonl   CC-News JSON lines (news-please or HF cc_news fields)
  warc           WARC files of HTML pages (main text extracted with trafilatura)
  documents      Parquet or JSONL files with the documents/ schema

Any other flag is passed to Apache Beam, e.g. --runner DataflowRunner --project P --region R
--temp_location gs://B/tmp --sdk_container_image IMAGE (see deploy/dataflow/README.md).
Locally the default is the DirectRunner with 2 worker processes.
"""


def _prepare(args: argparse.Namespace, beam_args: list[str]) -> int:
    """Beam flags (anything the parser does not know) pass through to the pipeline."""
    from realm.pipelines import prepare

    argv = ["--corpus", args.corpus, "--output", args.output]
    if args.input:
        argv += ["--input", args.input]
    if args.knowledge_blocks:
        argv += ["--knowledge_blocks", args.knowledge_blocks]
    if args.limit is not None:
        argv += ["--limit", str(args.limit)]
    prepare.run(argv + beam_args)
    return 0


def _pipeline_params(args: argparse.Namespace):
    from realm.flows.params import PipelineParams

    params = PipelineParams.preset(args.preset, output=args.output)
    if args.model_preset:
        params.run.model_preset = args.model_preset
    if args.device:
        params.run.device = args.device
    if args.seed is not None:
        params.run.seed = args.seed
    return params


def _print_json(value) -> None:
    print(json.dumps(value, sort_keys=True, default=str))


def _run(args: argparse.Namespace, beam_args: list[str]) -> int:
    from realm.flows.evaluate import share_text
    from realm.flows.realm_pipeline import realm_pipeline

    params = _pipeline_params(args)
    params.prepare.beam_args = beam_args
    result = realm_pipeline(params)
    summary = {"evaluate": result["evaluate"], "pretrain": {k: result["pretrain"][k] for k in (
        "accuracy_with_retrieval", "accuracy_null_only", "examples")}}
    if args.json:
        _print_json(summary)
        return 0
    print(f"run root: {params.run.output}\n")
    print(f"{'questions':<12} {'n':>5} {'EM':>6} {'reader acc.':>12} {'recall@5':>9}")
    for dataset, m in result["evaluate"].items():
        print(f"{dataset:<12} {m['n']:>5} {m['em']:>6.3f} {share_text(m['reader_accuracy']):>12} {m['recall_at_5']:>9.3f}")
    pretrain = summary["pretrain"]
    if result["pretrain"]["step"]:
        print(f"\nmasked-span accuracy on {pretrain['examples']} held-out pre-training examples: "
              f"{pretrain['accuracy_with_retrieval']:.3f} with retrieval, {pretrain['accuracy_null_only']:.3f} null document alone")
    else:
        print("\npre-training: 0 steps (the index and the starting encoder only; the preset's choice)")
    print(f"\n$ realm ask --run {params.run.output} {json.dumps(EXAMPLE_QUESTION)}")
    _print_answer(_run_answerer(params.run.output, args.device), EXAMPLE_QUESTION, num_read=5, evidence=3)
    return 0


def _train(args: argparse.Namespace, extra: list[str]) -> int:
    _reject_extra(extra)
    params = _pipeline_params(args)
    stage = with_overrides(getattr(params, args.stage), args.param)
    setattr(params, args.stage, stage)
    if args.steps is not None:
        if "steps" not in type(stage).model_fields:
            raise SystemExit(f"--steps: the {args.stage} stage is sized in epochs; pass --param epochs=N")
        stage.steps = args.steps
    if args.stage == "ict":
        from realm.flows.ict_warm_start import ict_warm_start as stage_flow
    elif args.stage == "pretrain":
        from realm.flows.realm_pretrain import realm_pretrain as stage_flow
    elif args.stage == "warmup":
        from realm.flows.reader_warmup import reader_warmup as stage_flow
    else:
        from realm.flows.finetune_openqa import finetune_openqa as stage_flow

        if args.qa:
            stage.qa_train = args.qa
    _print_json(stage_flow(params.run, stage))
    return 0


def with_overrides(stage, assignments: list[str]):
    """`stage` (a pydantic parameter model) with each `field=value` applied, validated as the
    Prefect UI's form would (so `true`, `1e-4` and JSON lists parse to the field's type)."""
    values = stage.model_dump()
    for assignment in assignments:
        field, sep, value = assignment.partition("=")
        if not sep or field not in type(stage).model_fields:
            raise SystemExit(
                f"--param {assignment!r}: expected FIELD=VALUE with FIELD one of {sorted(type(stage).model_fields)}"
            )
        try:
            values[field] = json.loads(value)
        except json.JSONDecodeError:
            values[field] = value
    try:
        return type(stage).model_validate(values)
    except ValidationError as error:
        raise SystemExit(f"--param: {_reasons(error)}") from None


def _reasons(error: ValidationError) -> str:
    """A ValidationError's errors on one line, each as `_reason` puts it."""
    return "; ".join(_reason(e) for e in error.errors())


def _reason(error: dict) -> str:
    """One pydantic error as "field: reason", a check across fields by its own message alone
    (pydantic prefixes a raised ValueError's message with "Value error, ")."""
    reason = str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]
    return f"{'.'.join(map(str, error['loc']))}: {reason}" if error["loc"] else reason


def _evaluate(args: argparse.Namespace, extra: list[str]) -> int:
    _reject_extra(extra)
    from realm.flows.evaluate import evaluate, share_text
    from realm.schemas.run_layout import RunLayout
    from realm.flows.params import EvaluateParams, RunParams

    preset = RunLayout.at(args.run).model_preset()
    run = RunParams(output=args.run, device=args.device, **({"model_preset": preset} if preset else {}))
    metrics = evaluate(run, EvaluateParams(qa=args.qa, num_read=args.num_read), corpus=args.index)
    if args.json:
        keys = ("em", "reader_accuracy", "n_answer_read", "recall_at_5", "n")
        _print_json({d: {key: m[key] for key in keys} for d, m in metrics.items()})
    else:
        for dataset, m in metrics.items():
            print(f"{dataset:<10} n={m['n']:<5} EM {m['em']:.3f}  reader accuracy {share_text(m['reader_accuracy'])} "
                  f"of {m['n_answer_read']}  "
                  f"recall@1 {m['recall_at_1']:.3f}  recall@5 {m['recall_at_5']:.3f}  recall@20 {m['recall_at_20']:.3f}")
    return 0


def _reproduce(args: argparse.Namespace, extra: list[str]) -> int:
    _reject_extra(extra)
    from pathlib import Path

    from realm.flows.reproduce import realm_reproduce
    from realm.flows.reproduce_report import json_table

    rows = realm_reproduce(args.reproduce_params)
    print((Path(args.reproduce_params.output) / "results.md").read_text())
    if args.json:
        _print_json(json_table(rows))
    return 0


# The `realm reproduce` options that are `ReproduceParams` fields, passed on only when given,
# so that each default is the field's.
REPRODUCE_OPTIONS = ("output", "size", "seed", "seeds", "device", "systems")


def _reproduce_params(args: argparse.Namespace) -> ReproduceParams:
    """The reproduction's parameters from the command line."""
    from realm.flows.reproduce_systems import ReproduceParams

    qa_train, qa_dev = _reproduce_questions(args)
    if not qa_train:
        raise SystemExit("realm reproduce: no training questions (pass --qa_dir or --qa_train)")
    given = {name: getattr(args, name) for name in REPRODUCE_OPTIONS if getattr(args, name) is not None}
    return ReproduceParams(qa_train=qa_train, qa_dev=qa_dev, **given)


def _ask(args: argparse.Namespace, extra: list[str]) -> int:
    _reject_extra(extra)
    if not args.question.strip():
        raise SystemExit("realm ask: the question is empty")
    _print_answer(_run_answerer(args.run, args.device, args.index), args.question, args.num_read, args.evidence)
    return 0


def _info(args: argparse.Namespace, extra: list[str]) -> int:
    _reject_extra(extra)
    from realm.cli.run_info import format_info, run_info

    info = run_info(args.run)
    if args.json:
        _print_json(info)
    else:
        print(format_info(info))
    return 0


def _index(args: argparse.Namespace, extra: list[str]) -> int:
    _reject_extra(extra)
    from realm.model.networks.config import set_transformers_verbosity_error
    from realm.model.networks.device import select_device
    from realm.model.qa.other_corpus import index_other_corpus

    set_transformers_verbosity_error()
    try:
        update = index_other_corpus(args.run, args.corpus, args.name, args.max_block_wordpieces, select_device(args.device))
    except ValueError as error:  # a bad name, a BM25 run, a block length that does not match
        raise SystemExit(f"realm index: {error}") from None
    if args.json:
        _print_json(update.__dict__)
    else:
        print(f"corpus {args.name!r} version {update.version}: {update.blocks} blocks ({update.embedded} embedded, "
              f"{update.reused} unchanged, {update.dropped} dropped) in {update.seconds:.0f} s -> {update.path}")
        print(f"ask from it: realm ask --run {args.run} --index {args.name} \"QUESTION\"")
    return 0


def _serve(args: argparse.Namespace, extra: list[str]) -> int:
    _reject_extra(extra)
    import torch
    import uvicorn

    from realm.cli.http_app import create_app
    from realm.model.networks.device import usable_cores

    _check_can_listen(args.host, args.port)  # before the model loads, not after
    answerer = _run_answerer(args.run, args.device, args.index, args.bf16_reader)
    # One worker per core, each forward on one torch thread: a forward split across cores waits
    # at every op for the slowest core, which another process on the machine stalls (README,
    # Benchmarks). Set after loading: faiss's thread setting at load is torch's too (one OpenMP).
    torch.set_num_threads(1)
    app = create_app(answerer, args.run, workers=usable_cores())
    print(f"realm: serving {args.run} on http://{args.host}:{args.port}/ (Ctrl-C stops)")
    uvicorn.run(app, host=args.host, port=args.port, log_level="info" if args.verbose else "warning")
    return 0


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return int(text)


def _check_can_listen(host: str, port: int) -> None:
    """SystemExit naming the reason when the server could not listen on host:port (a name that
    does not resolve, an address not on this machine, a port taken or privileged). Binds as
    asyncio's `create_server` (uvicorn's) does: every address the host resolves to, an address
    family the machine cannot open skipped, IPv6 sockets IPv6-only."""
    import socket

    try:
        opened = 0
        for family, kind, protocol, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            try:
                probe = socket.socket(family, kind, protocol)
            except OSError:
                continue
            with probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
                opened += 1
        if not opened:
            raise OSError("no address it resolves to can be opened on this machine")
    except OSError as error:  # socket.gaierror included
        raise SystemExit(f"realm serve: cannot listen on {host}:{port}: {error.strerror or error}") from None


def _run_answerer(run_root: str, device: str | None, corpus: str | None = None, bf16_reader: bool = False):
    """The Answerer of a trained run (`Answerer.from_run`), over `corpus` when given."""
    from realm.model.networks.config import set_transformers_verbosity_error
    from realm.model.networks.device import select_device
    from realm.model.qa.answering import Answerer
    from realm.schemas import ArtifactError

    set_transformers_verbosity_error()
    try:
        return Answerer.from_run(run_root, device=select_device(device), corpus=corpus, bf16_reader=bf16_reader)
    except ArtifactError:
        raise  # main's one line for a damaged file
    except ValueError as error:  # e.g. a corpus name that is not a plain name
        raise SystemExit(f"realm: {error}") from None


def _print_answer(answerer, question: str, num_read: int, evidence: int) -> None:
    if why := answerer.why_unreadable(question):
        raise SystemExit(f"realm ask: {why}")
    (prediction,) = answerer.answer([question], num_read=num_read, num_retrieve=max(num_read, evidence))
    print(f"answer: {prediction.answer}  (p = {prediction.probability:.3f})")
    print("evidence:")
    for rank, block in enumerate(prediction.evidence[:evidence], start=1):
        excerpt = " ".join(block.text.split())[:200]
        read_from = "  <- the answer" if block.block_id == prediction.block_id else ""
        print(f"  {rank}. [{block.probability:.3f}] {block.title}: {excerpt}{read_from}")


def _compare(args: argparse.Namespace, extra: list[str]) -> int:
    _reject_extra(extra)
    from realm.flows.comparison import compare, compare_seeds, comparison_markdown, seeds_markdown
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
        _print_json(found)
    else:
        print(seeds_markdown(found, systems) if seeded else comparison_markdown(found, args.runs))
    return 0


def _reject_extra(extra: list[str]) -> None:
    if extra:
        raise SystemExit(f"unrecognised arguments: {' '.join(extra)}")


def _add_run_options(parser: argparse.ArgumentParser, output_default: str | None) -> None:
    parser.add_argument("--preset", choices=list(get_args(RunPreset)), default="default",
                        help="tiny: minutes, 300 articles, random 2-layer model; default: ~30 minutes, vital corpus; "
                        "gpu: full-size settings for a CUDA machine")
    parser.add_argument("--model_preset", choices=list(get_args(ModelPreset)),
                        help="the model preset every component is built with (default: the run preset's)")
    parser.add_argument("--output", default=output_default, required=output_default is None, help="run root")
    parser.add_argument("--device", help="torch device (default: CUDA when present, else CPU)")
    parser.add_argument("--seed", type=int, help="seed of every stage (default: the run preset's, 0)")


def build_parser() -> argparse.ArgumentParser:
    from realm.pipelines.corpus_names import CORPORA

    parser = argparse.ArgumentParser(
        prog="realm", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error (also REALM_DEBUG=1)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    prepare = commands.add_parser(
        "prepare",
        help="build blocks, pre-training and ICT examples from a corpus (Beam)",
        description="Run the corpus-preparation Beam pipeline: read -> chunk -> entities, salient -> trivial, and ict.",
        epilog=PREPARE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prepare.add_argument("--corpus", required=True, choices=CORPORA)
    prepare.add_argument("--input", help="path or glob of the corpus files (local or gs://)")
    prepare.add_argument("--output", required=True, help="run root the artifacts are written under")
    prepare.add_argument("--knowledge_blocks", help="blocks/ of another run to filter trivial retrievals against")
    prepare.add_argument("--limit", type=int, help="read at most this many vital articles (quick runs)")
    prepare.set_defaults(handler=_prepare)

    run = commands.add_parser("run", help="the whole chain end to end (Prefect flow realm-pipeline)",
                              description="prepare -> ICT -> pre-train -> fine-tune -> evaluate; Beam flags pass through to prepare.")
    _add_run_options(run, None)
    run.add_argument("--json", action="store_true", help="print the scores as one JSON line (for scripts)")
    run.set_defaults(handler=_run)

    train = commands.add_parser("train", help="one training stage (Prefect flow)")
    train.add_argument("stage", choices=["ict", "pretrain", "warmup", "finetune"])
    _add_run_options(train, None)
    train.add_argument("--steps", type=int, help="override the preset's number of steps")
    train.add_argument("--param", action="append", default=[], metavar="FIELD=VALUE",
                       help="override any stage parameter, e.g. --param cached_doc_embeddings=true (repeatable)")
    train.add_argument("--qa", nargs="+", help="finetune: Open-QA training files (default: the shipped NQ, WQ and CT sets)")
    train.set_defaults(handler=_train)

    evaluate = commands.add_parser("evaluate", help="exact match and recall@k of a trained run on QA files")
    evaluate.add_argument("--run", required=True, help="run root")
    evaluate.add_argument("--qa", nargs="+", required=True, help="JSONL / NQ-open JSONL / WebQuestions JSON / CuratedTrec TSV")
    evaluate.add_argument("--json", action="store_true", help='end with one JSON line {"<dataset>": {"em", "recall_at_5", "n"}}')
    evaluate.add_argument("--num_read", type=_positive_int, default=5)
    evaluate.add_argument("--device")
    _add_index_option(evaluate)
    evaluate.set_defaults(handler=_evaluate)

    compare = commands.add_parser(
        "compare", help="EM (or masked-span accuracy) with bootstrap 95%% intervals and paired tests of runs on the same examples",
        description="Reads each run's predictions/ (written by `realm evaluate`) and masked_spans/ (written by "
        "pre-training's last evaluation), whichever every run has; the first run is the baseline the others are tested "
        "against (exact McNemar test on the questions, or masked spans, one gets right and the other wrong). For masked "
        "spans it also shows where p(z|x) ranked the retrieved blocks holding each span, and what the marginal made of the "
        "spans only such a block's reading gets right. Systems trained on several seeds are named as their runs joined "
        "by commas (runs/orqa,runs/orqa_s1 runs/realm,runs/realm_s1; so a run's path cannot hold one), paired seed by "
        "seed in the order given for the summed right-only counts: their mean EM over the seeds, its difference from "
        "the first system's with a bootstrap 95%% interval over the questions, and a sign-flip test of it, both on each "
        "question's seed-averaged outcomes.",
    )
    compare.add_argument("runs", nargs="+", help="run roots, baseline first (a system's seeds: runs joined by commas)")
    compare.add_argument("--json", action="store_true",
                         help='print {"questions": rows, "overall": rows, "masked_spans": rows} (those every run has), '
                         'or {"over_seeds": rows}, as one JSON line')
    compare.add_argument("--datasets", type=_dataset_names, metavar="NAME,NAME",
                         help="compare the questions of these datasets only, and average EM over them (nq,wq,ct: the "
                         "three dev sets' mean, without the demo set); default: every dataset all the runs evaluated")
    compare.set_defaults(handler=_compare)

    reproduce = commands.add_parser(
        "reproduce", help="REALM vs ICT-only (ORQA) vs BM25 + reader, with ablations (Prefect flow realm-reproduce)",
        description="Train and evaluate every system of the reproduction table on one corpus and question set.",
    )
    reproduce.add_argument("--output", help="root of every run it trains")
    reproduce.add_argument("--size", choices=list(get_args(RunPreset)),
                           help="default: this 2-core CPU, hours; gpu: full-size settings for a CUDA machine")
    reproduce.add_argument("--qa_dir", help="a folder of <dataset>.train.jsonl and <dataset>.dev.jsonl files")
    reproduce.add_argument("--qa_train", nargs="+", default=[], help="Open-QA training files")
    reproduce.add_argument("--qa_dev", nargs="+", default=[], help="Open-QA evaluation files")
    reproduce.add_argument("--systems", nargs="+", help="a subset of the rows (default: all)")
    reproduce.add_argument("--seed", type=int,
                           help="seed of the question split, the corpus, ICT, pre-training and the first fine-tuning")
    reproduce.add_argument("--seeds", type=_positive_int,
                           help="fine-tuning runs per system (seeds --seed, --seed + 1, ...), each system paired with orqa over the seeds both have")
    reproduce.add_argument("--device")
    reproduce.add_argument("--json", action="store_true",
                           help='end with one JSON line {"<system>": {"<dataset>": {"em", "em_per_seed", "seeds", "recall_at_5", "zero_shot_recall_at_5", "n"}}}, em and recall_at_5 averaged over the seeds')
    reproduce.set_defaults(handler=_reproduce)

    ask = commands.add_parser("ask", help="answer a question with a trained run, with its evidence")
    ask.add_argument("--run", required=True, help="run root")
    ask.add_argument("question")
    ask.add_argument("--num_read", type=_positive_int, default=5)
    ask.add_argument("--evidence", type=int, default=3, help="evidence blocks to show")
    ask.add_argument("--device")
    _add_index_option(ask)
    ask.set_defaults(handler=_ask)

    serve = commands.add_parser("serve", help="answer over HTTP, with a web page (FastAPI)")
    serve.add_argument("--run", required=True, help="run root")
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on (loopback unless told otherwise)")
    serve.add_argument("--port", type=_port, default=8000)
    serve.add_argument("--device")
    serve.add_argument(
        "--bf16-reader", action="store_true",
        help="run the reader entirely in bf16: ~13%% less CPU per question, a few answers differ (README, Benchmarks)",
    )
    _add_index_option(serve)
    serve.set_defaults(handler=_serve)

    info = commands.add_parser("info", help="what a run folder holds: stages, checkpoints, indexes and their lineage")
    info.add_argument("--run", required=True, help="run root")
    info.add_argument("--json", action="store_true", help="print it as one JSON line")
    info.set_defaults(handler=_info)

    index = commands.add_parser(
        "index", help="index another prepared corpus with a trained run's doc tower, for ask/serve/evaluate --index",
        description="Copy a prepared corpus's blocks into RUN/corpora/NAME/ and embed them with the doc tower that "
        "built the index the run fine-tuned against; indexing NAME again re-embeds only blocks whose content changed.",
    )
    index.add_argument("--run", required=True, help="a trained run root")
    index.add_argument("--corpus", required=True, help="a `realm prepare` output (or its blocks/)")
    index.add_argument("--name", default="default", help="the corpus's name in the run (default: %(default)s)")
    index.add_argument("--max_block_wordpieces", type=int,
                       help="only for a run whose index predates lineage: its pre-training block length")
    index.add_argument("--device")
    index.add_argument("--json", action="store_true", help="print the update's counts as one JSON line")
    index.set_defaults(handler=_index)
    return parser


def _add_index_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--index", metavar="NAME",
                        help="answer from the corpus NAME indexed for the run (`realm index`) instead of its own")


def _reproduce_questions(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """`realm reproduce`'s (training, evaluation) question files: those named, then --qa_dir's."""
    from pathlib import Path

    qa_train, qa_dev = list(args.qa_train), list(args.qa_dev)
    if args.qa_dir:
        qa_train += sorted(str(p) for p in Path(args.qa_dir).glob("*.train.jsonl"))
        qa_dev += sorted(str(p) for p in Path(args.qa_dir).glob("*.dev.jsonl"))
    return qa_train, qa_dev


def _check_inputs(args: argparse.Namespace) -> None:
    """Read every question file the command names, and check a reproduction's parameters, so a
    missing or malformed file or a refused value stops it with one line before a Prefect server
    starts or a flow logs the error with its traceback."""
    from realm.model.qa.qa_data import read_qa_file

    paths = sum(_reproduce_questions(args), []) if args.command == "reproduce" else list(getattr(args, "qa", None) or [])
    for path in paths:
        read_qa_file(path)
    if args.command == "reproduce":
        try:
            args.reproduce_params = _reproduce_params(args)
        except ValidationError as error:  # a refused setting; inside a flow one is a bug, and keeps its traceback
            raise SystemExit(f"realm reproduce: {_reasons(error)}") from None


def _dataset_names(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"an empty dataset name in {value!r}")
    return names


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from realm.model.publish import IntegrityError
    from realm.model.qa.qa_data import QAFormatError
    from realm.schemas import ArtifactError
    from realm.schemas.writer_lock import WriterBusy

    try:
        _check_inputs(args)
        if args.command in FLOW_COMMANDS:
            from realm.cli import prefect_server

            prefect_server.install()
        return args.handler(args, extra)
    except SystemExit as refusal:
        if not isinstance(refusal.code, str):  # an exit code (a command's, uvicorn's) passes through
            raise
        # A refusal naming its reason: the same one line and exit code as the errors below
        # (Python would exit 1 with it).
        print(refusal.code, file=sys.stderr)
        return 2
    except (QAFormatError, ArtifactError, IntegrityError, FileNotFoundError, WriterBusy) as error:
        # Errors a user can fix (a second writer: by waiting): one line saying what and where, not a traceback.
        if args.debug or os.environ.get("REALM_DEBUG"):
            raise
        print(f"realm {args.command}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
