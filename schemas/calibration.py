"""`calibration/calibrator.json`: the map from the reader's answer probability to the chance
the answer is right, fitted for one fine-tuned checkpoint (`realm.model.qa.calibration`).

Plain JSON, read with `json.loads` and checked field by field, never executed or unpickled:

    {"method": "platt", "slope": a, "bias": b,      p' = sigmoid(a * logit(p) + b)
     "checkpoint": "checkpoints/finetune/best/799", the checkpoint fitted for, relative to the run root
     "components_sha256": "...",                    its components' files (`checkpoint_components_sha256`)
     "num_read": 5,                                 blocks read when fitting
     "questions": 179, "exact_match": 0.223,        the validation questions fitted on, and their EM
     "ece_bins": 10, "ece_before": 0.32, "ece_after": 0.04}   on those questions

The directory's `manifest.json` holds the file's size and sha256 (`realm.model.publish.record_files`).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from realm.schemas.io import ArtifactError

CALIBRATION_DIR = "calibration"
CALIBRATOR_FILE = "calibrator.json"
METHODS = ("platt",)

# Field -> the types its value may have (bool is not a number here).
_FIELDS: dict[str, tuple[type, ...]] = {
    "method": (str,), "slope": (float, int), "bias": (float, int), "checkpoint": (str,), "components_sha256": (str,),
    "num_read": (int,), "questions": (int,), "exact_match": (float, int), "ece_bins": (int,), "ece_before": (float, int),
    "ece_after": (float, int),
}


def check_calibration_record(record: object, source: str) -> dict:
    """`record` when it holds every field with a value of its type (finite numbers, a known
    method); else an `ArtifactError` naming `source` and the first field that does not."""
    if not isinstance(record, dict):
        raise ArtifactError(f"{source}: not a calibrator (a JSON object of {', '.join(_FIELDS)})")
    for name, types in _FIELDS.items():
        value = record.get(name)
        if isinstance(value, bool) or not isinstance(value, types):
            raise ArtifactError(f"{source}: not a calibrator ({name!r} is {value!r}, not {' or '.join(t.__name__ for t in types)})")
        if isinstance(value, float) and not math.isfinite(value):
            raise ArtifactError(f"{source}: not a calibrator ({name!r} is {value!r}, not a finite number)")
    if record["method"] not in METHODS:
        raise ArtifactError(f"{source}: not a calibrator (method {record['method']!r}, not one of {', '.join(METHODS)})")
    return record


def write_calibration(directory: str | os.PathLike, record: dict) -> Path:
    """Write `record` (checked first) as `<directory>/calibrator.json`, replaced by rename so a
    reader never sees half of it; returns its path."""
    path = Path(directory) / CALIBRATOR_FILE
    check_calibration_record(record, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{CALIBRATOR_FILE}.tmp-{os.getpid()}")
    staged.write_text(json.dumps(record, indent=1, sort_keys=True))
    os.replace(staged, path)
    return path


def read_calibration(path: str | os.PathLike) -> dict:
    """The checked record at `path`; `ArtifactError` naming it when it does not parse or holds another shape."""
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ArtifactError(f"{path}: not a calibrator ({type(error).__name__}: {error})") from None
    return check_calibration_record(record, str(path))
