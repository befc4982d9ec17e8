"""Training: the JSONL dataset and its byte tokens, the SGD loop, the files it writes."""
