"""Question answering: question files, gold spans, retrieval for questions, answering with evidence, answer metrics and paired statistics."""
