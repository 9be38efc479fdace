"""Stage results cached with the run, as plain JSON: `<root>/.realm-cache/<task>-<key>.json`.

Expensive, deterministic stages (corpus preparation, whole training stages) are skipped on a
re-run with the same inputs and the same task code: the key hashes the task's arguments and
its source, as Prefect's `INPUTS + TASK_SOURCE` would. Prefect's own result persistence is not
used: it pickles results and unpickles them on a cache hit, so anyone able to write a run
folder could run code as whoever runs the flow next. Here a result is read with `json.loads`
only; an entry that does not parse is reported and the stage runs again (it resumes from its
own checkpoints). Deleting a run deletes its cache, and an entry can never point at artifacts
that are gone.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from collections.abc import Callable
from pathlib import Path

from prefect import get_run_logger
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel

from realm.schemas.run_layout import RunLayout

CACHE_DIR = ".realm-cache"


def cached_in_run(task, layout: RunLayout) -> Callable[..., dict]:
    """`task`, skipped when the run holds its JSON result for these arguments and this code.
    Results are JSON round-tripped on a miss too, so a hit returns exactly what a miss did."""
    uncached = task.with_options(cache_policy=NO_CACHE, persist_result=False)

    def run(*args, **kwargs) -> dict:
        path = layout.root / CACHE_DIR / f"{task.name}-{cache_key(task.fn, args, kwargs)}.json"
        logger = get_run_logger()
        if path.is_file():
            try:
                result = json.loads(path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                logger.warning("%s: unreadable cached result %s (%s); running the stage again", task.name, path, error)
            else:
                logger.info("%s: done before with these inputs and code; result from %s", task.name, path)
                return result
        result = json.loads(json.dumps(uncached(*args, **kwargs), default=_plain))
        _write_atomically(path, json.dumps(result, indent=1))
        return result

    return run


def cache_key(fn: Callable, args: tuple, kwargs: dict) -> str:
    """sha256 of the function's source and its arguments (pydantic models by their JSON)."""
    payload = json.dumps([inspect.getsource(fn), list(args), kwargs], sort_keys=True, default=_plain)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def _plain(value):
    """JSON for what the stages pass and return beyond JSON's own types."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    raise TypeError(f"{type(value).__name__} is not JSON: stage arguments and results must be plain data")


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    staging.write_text(text, encoding="utf-8")
    os.replace(staging, path)
