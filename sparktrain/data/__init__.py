"""Data sources behind one interface (base.py, the table in source.py): pairs
JSONL (pairs.py, pairs_source.py, its scoring pairs_score.py and task
families tasks.py), corpora of text files (corpus.py, corpus_source.py), JSONL
text rows (text.py); tokenizers; token streams on disk; bits per byte.
docs/training.md "Data sources"."""
