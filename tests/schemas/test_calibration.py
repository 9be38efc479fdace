import json

import pytest

from realm.schemas import ArtifactError
from realm.schemas.calibration import CALIBRATOR_FILE, read_calibration, write_calibration

RECORD = {
    "method": "platt", "slope": 0.6, "bias": -1.5, "checkpoint": "checkpoints/finetune/best/7",
    "components_sha256": "ab" * 32, "num_read": 5, "questions": 20, "exact_match": 0.25, "ece_bins": 10,
    "ece_before": 0.3, "ece_after": 0.04,
}


def test_a_calibrator_reads_back_as_written(tmp_path):
    path = write_calibration(tmp_path / "calibration", RECORD)
    assert path == tmp_path / "calibration" / CALIBRATOR_FILE
    assert read_calibration(path) == RECORD
    assert [p.name for p in path.parent.iterdir()] == [CALIBRATOR_FILE]  # no staging file left


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"slope": "0.6"}, "'slope' is '0.6', not float or int"),
        ({"bias": float("nan")}, "'bias' is nan, not a finite number"),
        ({"num_read": True}, "'num_read' is True, not int"),
        ({"questions": None}, "'questions' is None, not int"),
        ({"method": "isotonic"}, "method 'isotonic', not one of platt"),
    ],
)
def test_a_record_of_another_shape_is_refused_naming_the_file_and_field(tmp_path, change, reason):
    path = tmp_path / CALIBRATOR_FILE
    path.write_text(json.dumps(RECORD | change))
    with pytest.raises(ArtifactError) as refused:
        read_calibration(path)
    assert str(refused.value) == f"{path}: not a calibrator ({reason})"


def test_a_file_that_is_not_json_is_refused_naming_it(tmp_path):
    path = tmp_path / CALIBRATOR_FILE
    path.write_text('{"slope": ')
    with pytest.raises(ArtifactError, match=f"^{path}: not a calibrator \\(JSONDecodeError"):
        read_calibration(path)
    path.write_text("[1, 2]")
    with pytest.raises(ArtifactError, match="not a calibrator \\(a JSON object of method, slope"):
        read_calibration(path)
