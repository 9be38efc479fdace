"""The networks: configuration and presets, retriever towers, knowledge-augmented encoder, reader, their inputs, the marginal-likelihood math, checkpoints."""
