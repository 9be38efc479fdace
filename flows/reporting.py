"""What a training flow shows while it runs: log lines, a progress bar, metrics, loss curves.

`TrainingReporter` is the `ProgressFn` the trainers in `realm.model` call every few steps. It
logs through Prefect's run logger, moves a progress artifact, appends the metrics to
`<root>/reports/<stage>_metrics.jsonl` (so a resumed run's curve continues the old one, from
the step it resumed at) and,
at the end, renders the loss curve to PNG and publishes it as a markdown artifact.
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact

from realm.flows.caching import write_atomically
from realm.model.progress import format_duration


class TrainingReporter:
    def __init__(self, stage: str, reports_dir: Path, start_step: int, total_steps: int | None = None):
        """`start_step`: the trainer's step as it starts (its checkpoint's, 0 when fresh).
        `total_steps` None: a trainer that knows its length only once it has read its data
        (fine-tuning counts epochs); the progress dicts' `total_steps` then sets it."""
        self.stage = stage
        self.total_steps = total_steps
        self.logger = get_run_logger()
        reports_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = reports_dir / f"{stage}_metrics.jsonl"
        self.curve_path = reports_dir / f"{stage}_loss.png"
        self._forget_rows_after(start_step)
        self.progress_id = create_progress_artifact(
            progress=0.0, key=f"realm-{stage}-progress", description=f"{stage}: share of the steps done"
        )

    def __call__(self, metrics: dict) -> None:
        step = int(metrics["step"])
        self.total_steps = int(metrics.get("total_steps", self.total_steps))
        shown = ", ".join(
            f"{k} {v:.4g}" for k, v in metrics.items()
            if isinstance(v, float) and k not in ("steps_per_s", "eta_s", "elapsed_s")
        )
        self.logger.info(
            "%s step %d/%d: %s | %.2f steps/s, ETA %s",
            self.stage, step, self.total_steps, shown, metrics.get("steps_per_s", 0.0), format_duration(metrics.get("eta_s")),
        )
        update_progress_artifact(self.progress_id, progress=100.0 * min(step, self.total_steps) / max(self.total_steps, 1))
        self.record(metrics)

    def record(self, metrics: dict) -> None:
        """Append one row (it must carry "step") to the metrics file the curves are drawn from."""
        with self.metrics_path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(metrics, default=float) + "\n")

    def _forget_rows_after(self, start_step: int) -> None:
        """Rows of steps this run will do again go: a killed run's steps after its last
        checkpoint, or all of a set-aside run's when this one starts fresh."""
        if not self.metrics_path.exists():
            return
        lines = [line for line in self.metrics_path.read_text().splitlines() if line.strip()]
        kept = [line for line in lines if json.loads(line)["step"] <= start_step] if start_step else []
        if len(kept) < len(lines):
            write_atomically(self.metrics_path, "".join(line + "\n" for line in kept))

    def publish_curves(self, series: tuple[str, ...] = ("loss",)) -> Path | None:
        """Plot the logged `series` against step into a PNG and a markdown artifact."""
        if not self.metrics_path.exists():
            return None
        rows = [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line.strip()]
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot

        figure, axes = pyplot.subplots(1, len(series), figsize=(5 * len(series), 3.2), squeeze=False)
        for axis, name in zip(axes[0], series):
            points = sorted({r["step"]: r[name] for r in rows if name in r}.items())
            axis.plot([p[0] for p in points], [p[1] for p in points])
            axis.set_xlabel("step")
            axis.set_title(f"{self.stage} {name}")
            axis.grid(alpha=0.3)
        figure.tight_layout()
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=90)
        pyplot.close(figure)
        self.curve_path.write_bytes(buffer.getvalue())
        encoded = base64.b64encode(buffer.getvalue()).decode("ascii")
        create_markdown_artifact(
            key=f"realm-{self.stage}-curves",
            markdown=f"## {self.stage} training curves\n\n![{self.stage} curves](data:image/png;base64,{encoded})\n\n"
            f"PNG: `{self.curve_path}`",
            description=f"{self.stage} loss curves",
        )
        return self.curve_path
