"""What the flows show: log lines, a progress bar, metrics, loss curves, and the figures of
how far answer probabilities can be trusted.

`TrainingReporter` is the `ProgressFn` the trainers in `realm.model` call every few steps. It
logs through Prefect's run logger, moves a progress artifact, appends the metrics to
`<root>/reports/<stage>_metrics.jsonl` (so a resumed run's curve continues the old one, from
the step it resumed at) and,
at the end, renders the loss curve to PNG and publishes it as a markdown artifact.
`reliability_diagram` and `risk_coverage_plot` draw the evaluation's and calibration's PNGs;
`image_markdown` puts a PNG inside a markdown artifact.
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
from realm.model.qa.calibration import expected_calibration_error, reliability_bins


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
        pyplot = _pyplot()
        figure, axes = pyplot.subplots(1, len(series), figsize=(5 * len(series), 3.2), squeeze=False)
        for axis, name in zip(axes[0], series):
            points = sorted({r["step"]: r[name] for r in rows if name in r}.items())
            axis.plot([p[0] for p in points], [p[1] for p in points])
            axis.set_xlabel("step")
            axis.set_title(f"{self.stage} {name}")
            axis.grid(alpha=0.3)
        self.curve_path.write_bytes(figure_png(figure))
        create_markdown_artifact(
            key=f"realm-{self.stage}-curves",
            markdown=f"## {self.stage} training curves\n\n{image_markdown(f'{self.stage} curves', self.curve_path)}",
            description=f"{self.stage} loss curves",
        )
        return self.curve_path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def figure_png(figure) -> bytes:
    """`figure` as PNG bytes; the figure is closed."""
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90)
    _pyplot().close(figure)
    return buffer.getvalue()


def image_markdown(title: str, png: Path) -> str:
    """The PNG at `png` inside markdown (a data URL: the Prefect UI shows it without reaching the run folder), and its path."""
    encoded = base64.b64encode(png.read_bytes()).decode("ascii")
    return f"![{title}](data:image/png;base64,{encoded})\n\nPNG: `{png}`"


def reliability_diagram(panels: dict[str, dict[str, tuple[list[float], list[bool]]]]) -> bytes:
    """One panel per name of `panels`, each {curve label: (probabilities, answered right)}: the
    exact match of each of the 10 equal-width probability bins against its mean probability
    (a marker's area grows with its questions), beside the diagonal of a calibrated model."""
    pyplot = _pyplot()
    figure, axes = pyplot.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.6), squeeze=False)
    for axis, (name, curves) in zip(axes[0], panels.items()):
        axis.plot([0, 1], [0, 1], color="0.6", linestyle="--", linewidth=1)
        for label, (probabilities, correct) in curves.items():
            filled = [b for b in reliability_bins(probabilities, correct) if b.count]
            ece = expected_calibration_error(probabilities, correct)
            (line,) = axis.plot([b.confidence for b in filled], [b.accuracy for b in filled], linewidth=1,
                                label=f"{label}, ECE {ece:.3f}")
            axis.scatter([b.confidence for b in filled], [b.accuracy for b in filled], color=line.get_color(),
                         s=[12 + 200 * b.count / len(probabilities) for b in filled], alpha=0.7)
        axis.set(xlim=(0, 1), ylim=(0, 1), xlabel="probability shown", ylabel="exact match",
                 title=f"{name} ({len(next(iter(curves.values()))[0])} questions)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7, loc="upper left")
    return figure_png(figure)


def risk_coverage_plot(curves: dict[str, tuple[list[float], list[float]]]) -> bytes:
    """Each dataset's exact match of the answers given against the share of questions answered."""
    pyplot = _pyplot()
    figure, axis = pyplot.subplots(figsize=(5, 3.6))
    for name, (coverage, exact_match) in curves.items():
        axis.plot(coverage, exact_match, label=name, linewidth=1.2)
    axis.set(xlim=(0, 1), ylim=(0, 1), xlabel="share of questions answered (most confident first)",
             ylabel="exact match of the answers given", title="risk-coverage")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    return figure_png(figure)
