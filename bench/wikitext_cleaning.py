"""What cleaning wikitext in a time-limited child process costs, measured side by side in one run.

    python bench/wikitext_cleaning.py [--articles 300] [--paragraphs 40]

`realm prepare --corpus wikipedia-xml` cleans every article through `TimeLimitedCalls` (a
child process that is killed when a page overruns `CLEANING_TIMEOUT_S`), so a pathological
page cannot hold a worker. Both sides clean the same synthetic articles (the tests' Paris
article, its body repeated `--paragraphs` times: templates, references, links, a table and
appendix sections, 14 KB at the default):
1. in-process: `wikitext_to_plain_text(text)` in a loop;
2. isolated: the same calls through `TimeLimitedCalls`, the child started before timing (as
   the DoFn's `setup` does once per worker).
The two alternate for `--rounds` rounds; each side's median round is compared. Target:
isolated / in-process <= 1.10. Ends with one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds the article

from realm.pipelines.read_wikipedia_xml import CLEANING_TIMEOUT_S  # noqa: E402
from realm.pipelines.time_limit import TimeLimitedCalls  # noqa: E402
from realm.pipelines.wikitext import wikitext_to_plain_text  # noqa: E402
from tests.pipelines.wikipedia_fixture import PARIS_WIKITEXT  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--articles", type=int, default=300)
    parser.add_argument("--paragraphs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    head, _, body = PARIS_WIKITEXT.partition("== History ==")
    articles = [f"{head}{'== History ==' + body * args.paragraphs}<!-- {i} -->" for i in range(args.articles)]
    isolated = TimeLimitedCalls(wikitext_to_plain_text, CLEANING_TIMEOUT_S)
    rounds = {"in_process": [], "isolated": []}
    try:
        isolated("")  # the child's start-up, as setup pays it
        for _ in range(args.rounds):
            outputs = []
            for name, clean in (("in_process", wikitext_to_plain_text), ("isolated", isolated)):
                started = time.perf_counter()
                outputs.append([clean(text) for text in articles])
                rounds[name].append(time.perf_counter() - started)
            assert outputs[0] == outputs[1]
    finally:
        isolated.close()
    median = {name: statistics.median(seconds) for name, seconds in rounds.items()}
    ratio = median["isolated"] / median["in_process"]
    kb = sum(map(len, articles)) / len(articles) / 1024
    print(f"{len(articles)} articles of {kb:.1f} KB, median of {args.rounds} alternating rounds: isolated "
          f"{1000 * median['isolated'] / len(articles):.2f} ms an article vs in-process "
          f"{1000 * median['in_process'] / len(articles):.2f} ms: {ratio:.3f}x (target <= 1.10)")
    print(json.dumps({"articles": len(articles), "kb_per_article": round(kb, 1), "rounds_s": rounds, "ratio": ratio}))


if __name__ == "__main__":
    main()
