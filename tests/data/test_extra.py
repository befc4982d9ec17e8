"""corpus.extra: site-packages files in the train split only, deduplicated, no copy of a
held-out file, the held-out split and its bytes unchanged, the baselines primed with them."""
import subprocess
import sys
from pathlib import Path

import pytest

from sparktrain.data import extra
from sparktrain.data.baselines import compressor_bpb
from sparktrain.data.corpus import heldout_bytes, is_heldout, read_corpus, train_bytes
from sparktrain.data.extra import SITE, with_extra
from sparktrain.data.source import CorpusSource, prepare_job
from sparktrain.core.errors import SparkError
from sparktrain.core.safeload import load_json_file, load_yaml
from sparktrain.params import parse_params

ROOT = Path(__file__).resolve().parents[2]
FRACTION = 0.3


def tree(root, files):
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def code(tag: str, n: int = 30) -> str:
    """A file of n distinct lines long enough to count towards a near copy."""
    return "".join(f"def {tag}_function_{i}(value):\n    return value * {i} + len({tag!r})\n"
                   for i in range(n))


def stdlib(tmp_path):
    """A fake standard library: 40 modules, some held out by FRACTION; its held-out names."""
    files = {f"m{i:02d}.py": code(f"m{i:02d}") for i in range(40)}
    held = sorted(p for p in files if is_heldout(p, FRACTION))
    assert held and len(held) < 40
    return tree(tmp_path / "lib", files), held, files


def site(tmp_path, lib_files, held):
    """A fake site-packages: plain modules, a duplicate pair, copies of a held-out and a
    train file, a near copy (re-indented, a few lines changed) of a held-out one, tests."""
    train = next(p for p in lib_files if p not in held)
    near = lib_files[held[1]].replace("    return", "        return", 25)
    near = near.replace("_function_3(", "_renamed_3(") + "extra_line = 'added here'\n"
    return tree(tmp_path / "site", {
        "pkga/core.py": code("core"), "pkga/util.py": code("util"),
        "pkga/copy_of_util.py": code("util"),             # an exact duplicate
        "pkgb/stolen.py": lib_files[held[0]],             # a held-out file, as is
        "pkgb/near.py": near,                             # a held-out file, nearly
        "pkgb/trained.py": lib_files[train],              # a train file: a duplicate
        "pkgb/tests/test_core.py": code("test"),          # tests: left out
        "pkgb/_vendor/six.py": code("six")})              # vendored: left out


def test_extra_files_are_deduplicated_and_never_copies_of_heldout(tmp_path):
    lib, held, files = stdlib(tmp_path)
    root = site(tmp_path, files, held)
    base = read_corpus(str(lib), "*.py", FRACTION)
    got = with_extra(base, ["pkga/*.py", "pkgb/**/*.py"], root)
    added = [f.path for f in got.files if f.path.startswith(SITE)]
    assert added == [f"{SITE}/pkga/copy_of_util.py", f"{SITE}/pkga/core.py"]  # util: the same
    assert got.extra["duplicates"] == 2 and got.extra["skipped_tests_vendored"] == 2
    assert got.extra["heldout_copies"] == [f"{SITE}/pkgb/near.py ~ {held[1]}",
                                           f"{SITE}/pkgb/stolen.py ~ {held[0]}"]
    assert got.extra["files"] == 2 and got.extra["bytes"] == 2 * len(code("core"))
    assert [f.path for f in got.files] == sorted(f.path for f in got.files)


def test_heldout_split_is_the_same_with_and_without_extras(tmp_path):
    lib, held, files = stdlib(tmp_path)
    root = site(tmp_path, files, held)
    base = read_corpus(str(lib), "*.py", FRACTION)
    got = with_extra(base, ["**/*.py"], root)
    assert got.heldout == base.heldout and heldout_bytes(got) == heldout_bytes(base)
    assert not any(f.heldout for f in got.files if f.path.startswith(SITE))
    assert len(got.train) == len(base.train) + got.extra["files"]
    assert "extra" not in base.manifest() and with_extra(base, (), root) is base
    m = got.manifest()
    assert m["heldout_bytes"] == base.manifest()["heldout_bytes"]
    assert m["extra"]["sha256"] != m["sha256"] and m["sha256"] != base.manifest()["sha256"]


def test_baselines_and_tokens_read_the_extra_text(tmp_path, monkeypatch):
    lib, held, files = stdlib(tmp_path)
    monkeypatch.setattr(extra, "site_root", lambda: site(tmp_path, files, held))
    source = CorpusSource(str(lib), ("*.py",), FRACTION, ("pkga/*.py",))
    corpus = source.read()
    assert code("core") in [t for t in source.tokenizer_texts()]  # the BPE learns from it too
    prepare_job(tmp_path / "job", source, "byte", 259)
    m = load_json_file(tmp_path / "job" / "corpus" / "files.json", "files")
    assert m["extra"]["files"] == 2
    assert m["train_tokens"] == m["train_bytes"] + 2 * m["train_files"]  # bytes + BOS/EOS
    primer = train_bytes(corpus)
    assert code("core").encode() in primer
    base = m["heldout_baselines"]
    assert base["primer_bytes"] == len(primer) == m["train_bytes"]
    assert base == compressor_bpb(heldout_bytes(corpus), primer)


@pytest.mark.parametrize("globs, says", [
    (["/etc/*.py"], "must be a relative pattern"), (["../*.py"], "must be a relative pattern"),
    (["nothing/*.py"], "matches no file under site-packages")])
def test_a_bad_extra_glob_is_one_line(tmp_path, globs, says):
    lib, held, files = stdlib(tmp_path)
    root = site(tmp_path, files, held)
    with pytest.raises(SparkError, match=says) as err:
        with_extra(read_corpus(str(lib), "*.py", FRACTION), globs, root)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("bad", ["", [""], [3], {"a": 1}, None])
def test_params_take_a_glob_or_a_list_and_refuse_others_in_one_line(bad):
    raw = load_yaml((ROOT / "data/programs/coder-proof.yaml").read_text(), "params")
    assert parse_params(raw).corpus.extra == ()
    for none in ([], ()):
        raw["corpus"]["extra"] = none
        assert parse_params(raw).corpus.extra == ()
    raw["corpus"]["extra"] = "dask/**/*.py"
    assert parse_params(raw).corpus.extra == ("dask/**/*.py",)
    raw["corpus"]["extra"] = bad
    with pytest.raises(SparkError, match="extra must be a glob or a list of globs") as err:
        parse_params(raw)
    assert "\n" not in str(err.value)


def test_the_coder_proof_refuses_a_bad_extra_glob_in_one_line():
    run = subprocess.run([sys.executable, "tools/coder_proof.py", "-S",
                          'corpus.extra=["/abs/*.py"]'], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "must be a relative pattern" in run.stderr
