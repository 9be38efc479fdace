"""realm.model: the PyTorch side of REALM, in five rooms, each importing only those before it:

- `networks`  configuration and presets, retriever towers, encoder, reader, inputs, the
              marginal-likelihood math, checkpoints;
- `index`     block store, corpus embedding, MIPS, BM25, the refresh schedule;
- `qa`        question files, gold spans, retrieval for questions, answering, answer metrics;
- `analysis`  paired statistics, `realm compare`'s comparisons of runs, the reproduction table
              (torch-free; before `training`, whose masked-span evaluation runs its McNemar test);
- `training`  stage settings, the ICT / pre-training / fine-tuning trainers, loop plumbing.

Three modules sit beside them, shared by all and free of torch: `tokenization` (the Beam
pipelines use it too), `publish` (step directories published by rename) and `progress` (rate,
ETA and the progress line on stderr; the pipelines use it too). Nothing here
imports anything on import; use the modules directly (`realm.model.networks.reader`, ...).
"""
