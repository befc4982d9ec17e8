"""Output hygiene: modes follow the umask; control bytes never reach a terminal raw."""
from __future__ import annotations

import os
import pty
import stat
import subprocess

import pytest

from relkit import trained  # noqa: F401  (fixture)
from sparkhelp import PROMPT_GUARD_S, SPARK, run_spark
from sparktrain.core.errors import printable
from sparktrain.core.fsutil import write_json


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_follow_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        write_json(tmp_path / "a.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == mode


def test_trained_job_files_follow_the_umask(trained):
    project, weights = trained
    mask = os.umask(0)
    os.umask(mask)     # the spark process inherited this umask from the test process
    for p in weights.parent.iterdir():
        if p.is_file():
            assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~mask, p.name


def test_printable_escapes_controls_only():
    assert printable("a\x1b[2Jb\x07\x9b\n\tz", keep="\n\t") == "a\\x1b[2Jb\\x07\\x9b\n\tz"
    assert printable("line\nnext") == "line\\x0anext"
    assert printable("héllo ✓") == "héllo ✓"


def test_error_messages_escape_program_strings(tmp_path):
    src = tmp_path / "p.spark"
    src.write_text('model train dataset "no\x1b[31mfile.jsonl" base "b" out "out/j" '
                   'method "spark_distill_cpu" -> t\n')
    rc, _, err = run_spark(["compile", src, "-o", tmp_path / "p.sparkbc"], cwd=tmp_path)
    assert rc == 0, err
    rc, _, err = run_spark(["run", tmp_path / "p.sparkbc"], cwd=tmp_path)
    assert rc == 2 and "\x1b" not in err and "\\x1b[31m" in err


def _on_a_terminal(argv, cwd):
    """stdout of `spark ARGV` run with a pseudo-terminal as stdout."""
    master, slave = pty.openpty()
    p = subprocess.Popen(SPARK + [str(a) for a in argv], cwd=cwd, stdout=slave,
                         stderr=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    p.wait(timeout=PROMPT_GUARD_S)
    os.close(master)
    return b"".join(chunks)


def test_print_of_a_program_string_is_escaped_only_on_a_terminal(tmp_path):
    src = tmp_path / "p.spark"
    src.write_text('let s "a\x1b]0;pwned\x07b"\nprint s\n')
    run_spark(["compile", src, "-o", tmp_path / "p.sparkbc"], cwd=tmp_path)
    rc, out, _ = run_spark(["run", tmp_path / "p.sparkbc"], cwd=tmp_path)
    assert rc == 0 and out == "a\x1b]0;pwned\x07b\n"            # a pipe gets the bytes
    shown = _on_a_terminal(["run", tmp_path / "p.sparkbc"], tmp_path)
    assert b"\x1b" not in shown and b"\\x1b]0;pwned\\x07b" in shown


def test_generate_escapes_on_a_terminal_unless_raw(trained, monkeypatch):
    import sparktrain.eval.generate as gen
    project, weights = trained
    # the model is untrained: what it says is random, so check the flag plumbing on
    # a fixed text through the same print path
    from sparktrain.cli import eval as commands
    def fixed(*a, tokens_out, **k):
        tokens_out.append([120, 27, 121])  # what the print path counts
        return ["x\x1b[2Jy"]

    monkeypatch.setattr(gen, "generate", fixed)

    class Tty:
        def __init__(self):
            self.text = ""

        def isatty(self):
            return True

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    import argparse
    for raw, want in ((False, "x\\x1b[2Jy\n"), (True, "x\x1b[2Jy\n")):
        tty = Tty()
        monkeypatch.setattr("sys.stdout", tty)
        args = argparse.Namespace(weights=str(weights), max_new=8, temperature=0.0, top_k=0,
                                  seed=0, prompt="hi", raw=raw, tokenizer=None,
                                  device="cpu")
        assert commands.cmd_generate(args) == 0
        assert tty.text == want
