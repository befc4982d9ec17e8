"""Corpus reading: globs, regular files only, UTF-8, the split by path hash."""
import os

import pytest

from sparktrain.data.base import STDLIB
from sparktrain.data.corpus import is_heldout, manifest_sha256, read_corpus
from sparktrain.core.errors import SparkError


def tree(root, files):
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return root


def many(n):
    return {f"pkg/m{i:03d}.py": f"x = {i}\n" for i in range(n)}


def test_glob_sorted_relative_paths_and_manifest(tmp_path):
    root = tree(tmp_path / "c", {**many(40), "notes.txt": "no", "pkg/sub.py/keep.py": "y = 1\n"})
    c = read_corpus(str(root), ["**/*.py"], 0.25)
    paths = [f.path for f in c.files]
    assert paths == sorted(paths) and len(paths) == 41
    assert "notes.txt" not in paths and "pkg/sub.py/keep.py" in paths  # a folder named *.py skipped
    m = c.manifest()
    assert m["train_files"] + m["heldout_files"] == 41
    assert m["train_bytes"] + m["heldout_bytes"] == sum(f.size for f in c.files)
    rec = m["files"][0]
    assert set(rec) == {"path", "size", "sha256", "split"}
    assert str(tmp_path) not in str(m["files"])  # file paths are relative to the root


def test_split_is_by_path_hash_only_and_heldout_never_in_train(tmp_path):
    a = read_corpus(str(tree(tmp_path / "a", many(60))), "**/*.py", 0.2)
    # more files and other contents: every old path keeps its side of the split
    b = read_corpus(str(tree(tmp_path / "b", {**{k: "changed\n" for k in many(60)},
                                               **{f"new{i}.py": "z\n" for i in range(30)}})),
                    "**/*.py", 0.2)
    side_a = {f.path: f.heldout for f in a.files}
    side_b = {f.path: f.heldout for f in b.files}
    assert all(side_b[p] == h for p, h in side_a.items())
    assert {f.path for f in a.train}.isdisjoint({f.path for f in a.heldout})
    assert 0 < len(a.heldout) < 60
    assert is_heldout("x.py", 0.999999) and not is_heldout("x.py", 1e-12)


def test_same_corpus_same_manifest_hash(tmp_path):
    root = str(tree(tmp_path / "c", many(20)))
    assert read_corpus(root, "**/*.py", 0.3).manifest() == read_corpus(root, "**/*.py", 0.3).manifest()
    c = read_corpus(root, "**/*.py", 0.3)
    (tmp_path / "c" / "pkg" / "m000.py").write_text("x = 'edited'\n")
    assert manifest_sha256(read_corpus(root, "**/*.py", 0.3).files) != c.manifest()["sha256"]


def test_not_utf8_names_the_file(tmp_path):
    root = tree(tmp_path / "c", {**many(20), "pkg/bad.py": b"x = '\xff'\n"})
    with pytest.raises(SparkError, match=r"corpus file pkg/bad.py is not UTF-8 \(bad byte at offset 5\)"):
        read_corpus(str(root), "**/*.py", 0.2)


def test_fifo_is_refused_without_blocking(tmp_path):
    root = tree(tmp_path / "c", many(20))
    os.mkfifo(root / "pkg" / "pipe.py")
    with pytest.raises(SparkError, match="corpus file pkg/pipe.py is not a regular file"):
        read_corpus(str(root), "**/*.py", 0.2)


def test_empty_match_missing_root_and_bad_fraction(tmp_path):
    root = tree(tmp_path / "c", {"a.txt": "x"})
    with pytest.raises(SparkError, match=r"corpus glob \*\*/\*.py matches no file"):
        read_corpus(str(root), "**/*.py", 0.1)
    with pytest.raises(SparkError, match="is not a folder"):
        read_corpus(str(tmp_path / "nope"), "**/*.py", 0.1)
    with pytest.raises(SparkError, match="relative pattern"):
        read_corpus(str(root), "/etc/*", 0.1)
    with pytest.raises(SparkError, match=r"in \(0, 1\)"):
        read_corpus(str(root), "*.txt", 1.0)


def test_a_split_without_files_is_one_line(tmp_path):
    root = tree(tmp_path / "c", {"only.py": "x = 1\n"})
    with pytest.raises(SparkError, match="split is empty"):
        read_corpus(str(root), "*.py", 0.1)


def test_stdlib_is_found_at_run_time():
    c = read_corpus(STDLIB, "*.py", 0.1)
    assert c.root == STDLIB
    assert "os.py" in {f.path for f in c.files}
    assert sum(f.size for f in c.files) > 1_000_000
