"""Corpora of text files: reading, the train / held-out split, tokenizers, token
streams on disk and the bits-per-byte scale (docs/training.md "Corpora")."""
