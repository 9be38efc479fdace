"""Question sets shipped with the package (`flows/data/`, sources and licences in its README).

- `demo_qa.jsonl`: 40 questions about facts in the vital articles, written for this project;
  never trained on, evaluated by the main job.
- `qa/*.train.jsonl`: NQ-open, WebQuestions and CuratedTrec training questions, each
  answerable from the vital corpus; the main job fine-tunes on them.
- `qa/*.heldout.jsonl`: the tenth of WebQuestions and CuratedTrec held out of training by
  question hash (seed 0, as `realm reproduce` holds it out); evaluated, never trained on.
"""

from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"


def demo_qa_path() -> Path:
    return DATA_DIR / "demo_qa.jsonl"


def training_qa_paths() -> list[str]:
    """The shipped training sets: what fine-tuning reads when given no question files."""
    return [str(path) for path in sorted((DATA_DIR / "qa").glob("*.train.jsonl"))]


def evaluation_qa_paths() -> list[str]:
    """The demo set and the shipped held-out tenths: what evaluation reads when given none."""
    return [str(demo_qa_path())] + [str(path) for path in sorted((DATA_DIR / "qa").glob("*.heldout.jsonl"))]
