"""The dead-letter convention shared by every stage.

A DoFn that can reject a record yields it with `reject(...)`, which tags it onto the
`DEAD_LETTER` output and counts it under the Beam metric namespace `realm.<stage>` with the
reason as counter name; the composite transform then returns
`{"<main>": kept, "dead_letter": rejected}` and the pipeline flattens every stage's
rejections into one `dead_letter/` table.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam import pvalue

from realm.schemas.dead_letter import dead_letter_record

DEAD_LETTER = "dead_letter"
METRIC_NAMESPACE_PREFIX = "realm."


def counter(stage: str, name: str) -> beam.metrics.metric.Metrics.DelegatingCounter:
    """The Beam counter `realm.<stage>/<name>`; the run summary groups counters by stage."""
    return beam.metrics.Metrics.counter(METRIC_NAMESPACE_PREFIX + stage, name)


def reject(stage: str, record_key, reason: str, detail: str = "", raw=None) -> pvalue.TaggedOutput:
    """Count a rejection and return it as a tagged dead-letter output."""
    record = dead_letter_record(stage, record_key, reason, detail, raw)
    counter(stage, record["reason"]).inc()
    return pvalue.TaggedOutput(DEAD_LETTER, record)
