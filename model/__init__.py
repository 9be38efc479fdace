"""realm.model: the PyTorch side of REALM.

Retriever towers, knowledge-augmented encoder, reader, marginal likelihood, candidate
assembly, MIPS index, corpus embedding, checkpoints and the index refresh schedule, one
module each; import them directly (`realm.model.retriever`, ...). This file imports nothing,
so Beam workers can use `realm.model.tokenization` without loading torch.
"""
