"""The BLAS kernel is chosen before numpy loads (portable Haswell by default),
the environment's OPENBLAS_CORETYPE is kept, and the kernel that really runs is
read back for the record (sparktrain/runtime.py, docs/portability.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from sparkhelp import PROMPT_GUARD_S, assert_one_line_error, run_spark
from sparktrain import runtime

AVX2_CPU = """processor : 0
flags\t\t: fpu sse2 avx avx2 fma bmi2
"""
OLD_CPU = """processor : 0
flags\t\t: fpu sse2 avx
"""
# What a process reports: how its kernel was chosen and the kernel OpenBLAS runs.
REPORT = """
import json, sys
{first}
from sparktrain import runtime
print(json.dumps({{"source": runtime.start().source, **runtime.made_with()}}))
"""


def environment_coretype() -> str | None:
    """OPENBLAS_CORETYPE as the environment set it (None when this session's
    sparktrain chose it): tests never override the environment's value."""
    return os.environ.get(runtime.CORETYPE) if runtime.start().source == "environment" \
        else None


def base_env(**extra) -> dict:
    env = dict(os.environ)
    if environment_coretype() is None:
        env.pop(runtime.CORETYPE, None)
    env.pop(runtime.CHOSEN, None)
    env.pop(runtime.KERNEL_ENV, None)
    env.update(extra)
    return env


def report(first: str = "", **extra) -> tuple[dict, str]:
    done = subprocess.run([sys.executable, "-c", REPORT.format(first=first)],
                          env=base_env(**extra), capture_output=True, text=True, timeout=PROMPT_GUARD_S)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr


def native_kernel() -> str:
    """The kernel OpenBLAS picks by itself: numpy alone, no sparktrain."""
    code = ("import numpy, json; from threadpoolctl import threadpool_info; "
            "print([p['architecture'] for p in threadpool_info() if p['user_api'] == 'blas'][0])")
    done = subprocess.run([sys.executable, "-c", code], env=base_env(), capture_output=True,
                          text=True, timeout=PROMPT_GUARD_S)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


needs_unset = pytest.mark.skipif(environment_coretype() is not None,
                                 reason="the environment sets OPENBLAS_CORETYPE")
needs_avx2 = pytest.mark.skipif(
    not (runtime.cpu_has_avx2_fma() and os.uname().machine in runtime.X86),
    reason="the portable kernel needs an x86-64 CPU with AVX2 + FMA")


# --- the choice, on its own ----------------------------------------------------

def test_unset_on_an_avx2_cpu_chooses_haswell_and_marks_it_ours():
    env = {}
    got = runtime.choose(env, numpy_loaded=False, machine="x86_64", cpuinfo=AVX2_CPU)
    assert got.source == "portable" and got.coretype == "Haswell"
    assert env == {runtime.CORETYPE: "Haswell", runtime.CHOSEN: "Haswell"}
    # a child process inherits both: still "portable", not the environment's
    assert runtime.choose(dict(env), numpy_loaded=False, machine="x86_64",
                         cpuinfo=AVX2_CPU).source == "portable"


def test_the_environments_value_is_kept_and_recorded_as_its_own():
    env = {runtime.CORETYPE: "Zen"}
    got = runtime.choose(env, numpy_loaded=False, machine="x86_64", cpuinfo=AVX2_CPU)
    assert got.source == "environment" and got.coretype == "Zen"
    assert env == {runtime.CORETYPE: "Zen"}
    env = {runtime.CORETYPE: "Haswell"}  # the same family, but the environment's choice
    assert runtime.choose(env, numpy_loaded=False, machine="x86_64",
                         cpuinfo=AVX2_CPU).source == "environment"


@pytest.mark.parametrize("kw, source", [
    ({"environ": {runtime.KERNEL_ENV: "native"}}, "native"),
    ({"numpy_loaded": True}, "preloaded"),
    ({"cpuinfo": OLD_CPU}, "no-avx2"),
    ({"machine": "aarch64"}, "not-x86"),
    ({"cpuinfo": "processor : 0\n"}, "unknown-cpu"),
])
def test_cases_that_leave_the_kernel_to_openblas_set_nothing(kw, source):
    env = kw.pop("environ", {})
    args = {"numpy_loaded": False, "machine": "x86_64", "cpuinfo": AVX2_CPU, **kw}
    got = runtime.choose(env, **args)
    assert got.source == source and got.coretype is None
    assert runtime.CORETYPE not in env


def test_the_notes_name_the_family_the_bytes_belong_to():
    record = {"kernel": "neoversen1", "numpy": "2.4.6", "blas": "openblas 0.3.31"}
    line = runtime.note(runtime.Choice("portable", "not-x86", None), record)
    assert "neoversen1 kernel family" in line and "\n" not in line
    line = runtime.note(runtime.Choice("portable", "preloaded", None), dict(record, kernel="SkylakeX"))
    assert "numpy was loaded before sparktrain" in line and "SkylakeX" in line
    assert runtime.note(runtime.Choice("portable", "preloaded", None),
                       dict(record, kernel="Haswell")) is None
    assert runtime.note(runtime.Choice("portable", "portable", "Haswell"), record) is None


def test_a_bad_spark_blas_kernel_is_one_line():
    assert_one_line_error(*run_spark(["--help"], env={runtime.KERNEL_ENV: "fast"})[::2],
                          "SPARK_BLAS_KERNEL='fast'", "portable, native")


# --- the kernel that really runs (threadpoolctl) ---------------------------------

@needs_unset
@needs_avx2
def test_default_process_runs_the_haswell_kernel():
    got, err = report()
    assert got["source"] == "portable" and got["kernel"] == "Haswell", got
    assert got["numpy"] and got["blas"].startswith("openblas "), got
    assert err == ""


@pytest.mark.skipif(environment_coretype() is None and not runtime.cpu_has_avx2_fma(),
                    reason="Sandybridge kernels need AVX")
def test_the_environments_coretype_is_what_runs():
    value = environment_coretype() or "Sandybridge"  # another family than the portable one
    got, _ = report(**{runtime.CORETYPE: value})
    assert got["source"] == "environment"
    assert got["kernel"].lower() == value.lower(), got


@needs_unset
@needs_avx2
def test_zen_runs_the_portable_family():
    """OpenBLAS runs its Haswell kernels for Zen: one family, one set of bytes."""
    got, _ = report(**{runtime.CORETYPE: "Zen"})
    assert got["source"] == "environment" and got["kernel"] == runtime.PORTABLE, got


@needs_unset
def test_native_opts_out():
    got, err = report(**{runtime.KERNEL_ENV: "native"})
    assert got["source"] == "native" and got["kernel"] == native_kernel()
    assert err == ""


@needs_unset
def test_numpy_loaded_first_says_in_one_line_which_kernel_the_bytes_follow():
    got, err = report(first="import numpy")
    assert got["source"] == "preloaded" and got["kernel"] == native_kernel()
    if got["kernel"] == runtime.PORTABLE:
        assert err == ""
    else:
        [line] = err.strip().splitlines()
        assert line.startswith("spark: note: numpy was loaded before sparktrain")
        assert f"({got['kernel']})" in line


@needs_unset
@needs_avx2
def test_child_processes_inherit_the_portable_kernel():
    code = (REPORT.format(first="") + "import subprocess\n"
            f"subprocess.run([sys.executable, '-c', {REPORT.format(first='')!r}])\n")
    done = subprocess.run([sys.executable, "-c", code], env=base_env(), capture_output=True,
                          text=True, timeout=PROMPT_GUARD_S)
    assert done.returncode == 0, done.stderr
    parent, child = (json.loads(ln) for ln in done.stdout.splitlines())
    assert parent == child and child["kernel"] == "Haswell" and child["source"] == "portable"
