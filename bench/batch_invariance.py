"""Does a question's answer depend on the other questions answered with it?

    python bench/batch_invariance.py --run runs/main [--qa FILE ...] [--bf16-reader]

`realm serve` and `realm evaluate` answer questions in batches of up to 16. One `Answerer` on
one torch thread (as each of the server's workers) answers the same questions (default: the
demo set and the held-out tenths) in batches of 16 and then one at a time; printed: how many
answers, evidence orders (the retrieved blocks' order) and scores differ between the two,
the largest differences in score and in p(z|x), and the CPU time per question of each (the
batching speed-up as a ratio). Ends with one JSON line of the figures.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from realm.flows.demo import evaluation_qa_paths
from realm.model.qa.answering import Answerer
from realm.model.qa.qa_data import read_qa_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="a trained run root")
    parser.add_argument("--qa", nargs="+", default=None, help="question files (default: demo set and held-out tenths)")
    parser.add_argument("--bf16-reader", action="store_true", help="as `realm serve --bf16-reader`")
    args = parser.parse_args()

    torch.set_num_threads(1)  # as `realm serve` runs each of its workers
    answerer = Answerer.from_run(args.run, bf16_reader=args.bf16_reader)
    questions = [e.question for path in (args.qa or evaluation_qa_paths()) for e in read_qa_file(path)]
    started = time.process_time()
    batched = answerer.answer(questions, batch_size=16)
    batched_cpu = time.process_time() - started
    started = time.process_time()
    alone = [answerer.answer([question])[0] for question in questions]
    alone_cpu = time.process_time() - started

    same_answer = [b.answer == a.answer for b, a in zip(batched, alone)]
    score_gaps = [abs(b.score - a.score) for b, a, same in zip(batched, alone, same_answer) if same and np.isfinite(a.score)]
    probability_gaps = [
        max(abs(e.probability - f.probability) for e, f in zip(b.evidence, a.evidence)) for b, a in zip(batched, alone)
    ]
    figures = {
        "questions": len(questions),
        "answers_differ": same_answer.count(False),
        "evidence_orders_differ": sum(b.retrieved_block_ids != a.retrieved_block_ids for b, a in zip(batched, alone)),
        "scores_differ": sum(b.score != a.score for b, a in zip(batched, alone)),
        "max_score_gap": round(max(score_gaps, default=0.0), 5),
        "max_retrieval_probability_gap": round(max(probability_gaps, default=0.0), 5),
        "cpu_ms_per_question_batches_of_16": round(1000 * batched_cpu / len(questions), 1),
        "cpu_ms_per_question_one_at_a_time": round(1000 * alone_cpu / len(questions), 1),
    }
    print(f"{len(questions)} questions, run {args.run}, reader {'in bf16' if args.bf16_reader else 'under bf16 autocast'}")
    print(f"answers that differ between batches of 16 and one at a time: {figures['answers_differ']}")
    print(f"evidence orders that differ: {figures['evidence_orders_differ']}; scores that differ in any bit: "
          f"{figures['scores_differ']} (largest gap {figures['max_score_gap']}, in p(z|x) "
          f"{figures['max_retrieval_probability_gap']})")
    print(f"CPU ms per question: {figures['cpu_ms_per_question_batches_of_16']} in batches of 16, "
          f"{figures['cpu_ms_per_question_one_at_a_time']} one at a time "
          f"({alone_cpu / batched_cpu:.2f}x batched throughput)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
