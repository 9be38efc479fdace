import json
import subprocess
import sys

TEXT = "Dr. Smith moved to the U.S. in 1990. He left!\nA heading\nIt ends here... or not? Yes."

# Prints, as JSON, whether torch was loaded once the sentencizer was, and the sentences of TEXT.
SENTENCES = f"""
import json, sys
from realm.pipelines.chunk import load_sentencizer, sentence_spans
sentences = [{TEXT!r}[start:end] for start, end in sentence_spans({TEXT!r}, load_sentencizer())]
loaded = "torch" in sys.modules
import torch  # still importable afterwards
print(json.dumps({{"torch_loaded": loaded, "sentences": sentences}}))
"""


def run_fresh(code: str) -> dict:
    """Run `code` in a fresh interpreter (what a worker is at its start); its JSON line."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_worker_loads_the_sentencizer_without_torch_and_splits_as_with_torch_loaded_first():
    expected = ["Dr. Smith moved to the U.S. in 1990.", "He left!", "A heading", "It ends here... or not?", "Yes."]
    assert run_fresh(SENTENCES) == {"torch_loaded": False, "sentences": expected}
    assert run_fresh("import torch\n" + SENTENCES) == {"torch_loaded": True, "sentences": expected}
