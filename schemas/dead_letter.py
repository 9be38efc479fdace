"""`dead_letter/`: every record a stage rejected, with a machine-readable reason.

Reasons are `<stage>_<cause>` (e.g. `read_undecodable_bytes`, `chunk_empty_body`) so that
counts group cleanly and tests can assert the exact pair.
"""

import pyarrow as pa

MAX_RAW_CHARS = 2000

DEAD_LETTER = pa.schema(
    [
        pa.field("stage", pa.string(), nullable=False),
        pa.field("record_key", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("detail", pa.string()),  # human-readable explanation (exception text, sizes)
        pa.field("raw", pa.string()),  # the offending record, truncated to MAX_RAW_CHARS
    ]
)


def dead_letter_record(stage: str, record_key: str, reason: str, detail: str = "", raw=None) -> dict:
    """A DEAD_LETTER row; `raw` may be bytes (decoded with replacement) or any str-able value."""
    if isinstance(raw, (bytes, bytearray)):
        raw = bytes(raw[: MAX_RAW_CHARS * 4]).decode("utf-8", errors="replace")
    elif raw is not None:
        raw = str(raw)
    return {
        "stage": stage,
        "record_key": str(record_key),
        "reason": reason if reason.startswith(stage + "_") else f"{stage}_{reason}",
        "detail": detail,
        "raw": None if raw is None else raw[:MAX_RAW_CHARS],
    }
