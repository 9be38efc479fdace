"""A run's settings from the command line: the presets, the ones a run remembers, and
`--param` overrides validated as the Prefect UI's form validates them.

    realm run --preset gpu --output runs/g --param finetune.epochs=2 --dry-run
    realm train finetune --output runs/g --param epochs=2     # runs/g's presets, remembered
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, get_args

from pydantic import ValidationError

if TYPE_CHECKING:
    from realm.flows.params import PipelineParams

# The run preset of a run that names none and records none.
DEFAULT_RUN_PRESET = "default"


def pipeline_params(args: argparse.Namespace) -> tuple[PipelineParams, str]:
    """The parameters of the run at `args.output`, and its run preset.

    The run preset is the one given, else the one the run was started with, else `default`;
    the model preset the one given, else (no run preset given) the run's recorded one, else
    the run preset's. A model preset other than the one the run's checkpoints were made with is
    refused in one line: they would load into no other. The BERT directory (`--bert`) is the one
    given, checked, else the run's recorded one; another than the run's is refused too."""
    from realm.flows.params import PipelineParams
    from realm.model.networks.presets import current_model_preset
    from realm.schemas.run_layout import RunLayout

    layout = RunLayout.at(args.output)
    recorded = current_model_preset(layout.model_preset())
    run_preset = args.preset or layout.run_preset() or DEFAULT_RUN_PRESET
    params = PipelineParams.preset(run_preset, output=args.output)
    if args.model_preset:
        params.run.model_preset = args.model_preset
    elif args.preset is None and recorded is not None:
        params.run.model_preset = recorded
    if recorded is not None and params.run.model_preset != recorded:
        raise SystemExit(f"realm {args.command}: {args.output} was made with model preset {recorded!r}; "
                         f"pass --model-preset {recorded} or a new --output")
    params.run.bert_dir = bert_dir(args, layout)
    if args.device:
        params.run.device = args.device
    if args.seed is not None:
        params.run.seed = args.seed
    return params, run_preset


def bert_dir(args: argparse.Namespace, layout) -> str | None:
    """`--bert` checked and made absolute, else the run's recorded one; SystemExit in one line for a
    directory that is not a BERT, or not the one the run was made with."""
    from realm.model.networks.bert_dir import BertDirError, check_bert_dir
    from realm.schemas.run_layout import bert_text

    recorded = layout.bert_dir() if layout.model_preset() is not None else None
    if not getattr(args, "bert", None):
        return recorded
    try:
        given = check_bert_dir(args.bert)
    except BertDirError as error:
        raise SystemExit(f"realm {args.command}: --bert {error}") from None
    if layout.model_preset() is not None and given != recorded:
        raise SystemExit(f"realm {args.command}: {args.output} was made with {bert_text(recorded)}; pass "
                         f"{'--bert ' + recorded if recorded else 'no --bert'} or a new --output")
    return given


def record_presets(params: PipelineParams, run_preset: str) -> None:
    """Remember the run's presets and BERT as it starts (the run preset only if it records none
    yet), a model preset recorded under its old name under its name now. The prepared vocabulary
    is checked by each training stage as it starts: `realm run` prepares again with its BERT first."""
    from realm.model.networks.presets import record_model_preset
    from realm.schemas.run_layout import RunLayout

    record_model_preset(RunLayout.at(params.run.output), params.run.model_preset, run_preset=run_preset,
                        bert_dir=params.run.bert_dir, check_vocabulary=False)


def with_stage_overrides(params: PipelineParams, assignments: list[str]) -> PipelineParams:
    """`params` with each `STAGE.FIELD=VALUE` applied to that stage (`with_overrides`), then
    checked whole, as the stages must agree with one another."""
    stages = [name for name in type(params).model_fields if name != "run"]
    by_stage: dict[str, list[str]] = {}
    for assignment in assignments:
        stage, dot, rest = assignment.partition(".")
        if not dot or stage not in stages:
            raise SystemExit(f"--param {assignment!r}: expected STAGE.FIELD=VALUE with STAGE one of {stages}")
        by_stage.setdefault(stage, []).append(rest)
    values = params.model_dump()
    for stage, stage_assignments in by_stage.items():
        values[stage] = with_overrides(getattr(params, stage), stage_assignments, prefix=f"{stage}.").model_dump()
    try:
        return type(params).model_validate(values)
    except ValidationError as error:
        raise SystemExit(f"--param: {reasons(error)}") from None


def with_overrides(stage, assignments: list[str], prefix: str = ""):
    """`stage` (a pydantic parameter model) with each `field=value` applied, validated as the
    Prefect UI's form would (so `true`, `1e-4` and JSON lists parse to the field's type)."""
    values = stage.model_dump()
    for assignment in assignments:
        field, sep, value = assignment.partition("=")
        if not sep or field not in type(stage).model_fields:
            raise SystemExit(
                f"--param {prefix + assignment!r}: expected {prefix or ''}FIELD=VALUE with FIELD one of "
                f"{sorted(type(stage).model_fields)}"
            )
        try:
            values[field] = json.loads(value)
        except json.JSONDecodeError:
            values[field] = value
    try:
        return type(stage).model_validate(values)
    except ValidationError as error:
        raise SystemExit(f"--param: {reasons(error, prefix)}") from None


def reasons(error: ValidationError, prefix: str = "") -> str:
    """A ValidationError's errors on one line, each as `_reason` puts it, their fields after `prefix`."""
    return "; ".join(_reason(e, prefix) for e in error.errors())


def _reason(error: dict, prefix: str = "") -> str:
    """One pydantic error as "field: reason", a check across fields by its own message alone
    (pydantic prefixes a raised ValueError's message with "Value error, ")."""
    reason = str(error["ctx"]["error"]) if error["type"] == "value_error" else error["msg"]
    where = prefix + ".".join(map(str, error["loc"])) if error["loc"] else prefix.rstrip(".")
    return f"{where}: {reason}" if where else reason
