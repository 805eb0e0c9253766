"""The indexer: full-text, vector and context-window rows, embeddings, simulations' rows."""
