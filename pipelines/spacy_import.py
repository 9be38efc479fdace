"""spaCy imported without torch, for pipeline workers that run spaCy's own components only.

thinc, under spaCy, imports torch at import time whenever torch is installed (it is: the
model side needs it), for its PyTorch wrappers, which no realm pipeline runs. In a Beam
worker that is the bulk of spaCy's import and more of its process exit than anything else
it loads, paid by every worker before its first element, and it breaks the rule that
pipelines never load torch. A process that has torch loaded already keeps it as it is.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType

# Stages' setups may run at once on a worker's threads; one import hides torch at a time.
_IMPORTING = threading.Lock()


def import_spacy() -> ModuleType:
    """The `spacy` module; the first import in a process without torch leaves torch unloaded
    (thinc then reports no torch, which spaCy's own pipelines never ask for). While it runs,
    `import torch` on another thread fails, so a stage that loads torch must not share a
    worker with it mid-setup; afterwards `import torch` works as before."""
    with _IMPORTING:
        if "spacy" in sys.modules or "torch" in sys.modules:
            import spacy

            return spacy
        # A None entry makes `import torch` raise ImportError, which thinc catches.
        sys.modules["torch"] = None
        try:
            import spacy
        finally:
            if "torch" in sys.modules and sys.modules["torch"] is None:
                del sys.modules["torch"]
        return spacy
