"""Master-key filters and scale-space models: depthwise banks, clustering, idealized models and their fits, swaps,
re-scoring."""
