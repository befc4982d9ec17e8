"""The text data source: a JSONL file of `{"text": ...}` rows, each a document split by
a hash of its text, then trained exactly as a corpus (docs/training.md "Data sources")."""
from __future__ import annotations

import hashlib
from pathlib import Path

from sparktrain.data.corpus import MAX_FILES, Corpus, CorpusFile, check_splits, is_heldout
from sparktrain.data.corpus_source import CorpusSource
from sparktrain.data.pairs import json_objects
from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import open_input, sha256_bytes


class TextSource(CorpusSource):
    kind = "text"

    def __init__(self, dataset: str, heldout_fraction: float):
        super().__init__(dataset, (), heldout_fraction)

    @classmethod
    def claims(cls, dataset: str) -> bool:
        """A file whose first row is an object with a string "text" and no pair fields."""
        try:
            with open_input(dataset, "dataset") as f:
                first = next(json_objects(f, dataset, hashlib.sha256()), None)
        except SparkError:
            return False
        return first is not None and isinstance(first[1].get("text"), str) \
            and not {"prompt", "completion", "messages"} & set(first[1])

    @classmethod
    def from_knobs(cls, dataset: str, knobs, heldout: str | None):
        return cls(dataset, knobs.corpus.heldout)

    def read(self) -> Corpus:
        if not 0 < self.heldout_fraction < 1:
            raise SparkError(f"heldout fraction must be in (0, 1), got {self.heldout_fraction}")
        files = []
        with open_input(self.dataset, "dataset") as f:
            for lineno, row in json_objects(f, self.dataset, hashlib.sha256()):
                if len(files) == MAX_FILES:  # one row is one file of files.json, as a corpus's
                    raise SparkError(f"{self.dataset}: over {MAX_FILES:,} text rows, the limit "
                                     f"a corpus has for its files (prepare and step read "
                                     f"files.json at their cap); join short rows")
                text = row.get("text")
                if not isinstance(text, str):
                    raise SparkError(f"{self.dataset}:{lineno}: 'text' must be a string")
                try:
                    data = text.encode("utf-8")
                except UnicodeEncodeError as err:
                    raise SparkError(f"{self.dataset}:{lineno}: the text holds a lone "
                                     f"surrogate at character {err.start}") from None
                digest = sha256_bytes(data)
                files.append(CorpusFile(f"row-{lineno:09d}", len(data), digest,
                                        is_heldout(digest, self.heldout_fraction), text))
        return check_splits(Corpus(Path(self.dataset).as_posix(), (), self.heldout_fraction,
                                   tuple(files)),
                            f"dataset {self.dataset}", "rows",
                            "add rows or change corpus.heldout")
