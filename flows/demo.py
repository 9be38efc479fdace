"""The demo Open-QA set shipped with the package: questions about facts in the vital articles."""

from pathlib import Path


def demo_qa_path() -> Path:
    return Path(__file__).parent / "data" / "demo_qa.jsonl"
