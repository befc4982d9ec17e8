"""Data sources, tokenizers, token streams, bits per byte (docs/README.md "Where the code is")."""
