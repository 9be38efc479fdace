"""Question answering: question files, gold spans, retrieval for questions, answering with evidence and answer metrics."""
