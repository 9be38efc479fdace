"""Reading what runs produced: the paired statistics, `realm compare`'s comparisons of runs
question by question and masked span by masked span with their markdown tables, and the
reproduction's table of systems. Torch-free; the flows publish what these compute."""
