"""Task caching that lives with the run: keys and results under `<root>/.prefect/`.

Expensive, deterministic stages (corpus preparation, whole training stages) are cached on
their inputs and their code (`INPUTS + TASK_SOURCE`), so re-running a flow skips what is
done. Keys and results are stored inside the run root: deleting a run deletes its cache,
and a cache entry can never point at artifacts that are gone.
"""

from __future__ import annotations

from prefect.cache_policies import INPUTS, TASK_SOURCE

from realm.schemas.run_layout import RunLayout


def cached_in_run(task, layout: RunLayout):
    """`task` with a cache on inputs + source whose keys and results live in the run root."""
    store = layout.root / ".prefect"
    return task.with_options(
        cache_policy=(INPUTS + TASK_SOURCE).configure(key_storage=str(store / "cache-keys")),
        result_storage=store / "results",
        persist_result=True,
    )
