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


# Prints, as JSON, whether torch was loaded once the recogniser was, and its entities in TEXT.
ENTITIES = f"""
import json, sys
from realm.pipelines.ner import load_ner
entities = [[entity.text, entity.label_] for entity in load_ner()({TEXT!r}).ents]
loaded = "torch" in sys.modules
import torch  # still importable afterwards
print(json.dumps({{"torch_loaded": loaded, "entities": entities}}))
"""


def test_a_worker_loads_the_recogniser_without_torch_and_tags_as_with_torch_loaded_first():
    without_torch = run_fresh(ENTITIES)
    with_torch = run_fresh("import torch\n" + ENTITIES)
    assert without_torch["torch_loaded"] is False and with_torch["torch_loaded"] is True
    assert ["Smith", "PERSON"] in without_torch["entities"] and ["1990", "DATE"] in without_torch["entities"]
    assert without_torch["entities"] == with_torch["entities"]
