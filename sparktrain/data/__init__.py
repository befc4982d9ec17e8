"""Data sources behind one interface, tokenizers, token streams, bits per byte
(docs/README.md "Where the code is")."""
