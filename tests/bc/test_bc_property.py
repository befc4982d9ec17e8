"""Property tests: mutated bytes decode or raise BytecodeError, never anything
else; random valid programs round-trip.

Run with `-s` to see how many mutated inputs ran and how many escaped.
"""
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparktrain.bc.codec import decode, encode
from sparktrain.bc.compiler import compile_source
from sparktrain.bc.program import TABLE, CONST_STR, VERSION, Program, layout_code
from sparktrain.core.errors import BytecodeError

ROOT = Path(__file__).resolve().parents[2]
SEEDS = [compile_source((ROOT / p).read_text()) for p in
         ("tests/vectors/spark-train-step.spark", "data/programs/train-step.spark")]

COUNTS = {"mutated": 0, "decoded": 0, "rejected": 0, "escaped": 0}
SETTINGS = settings(max_examples=600, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
BODY_OPS = [op for op in TABLE if op.name != "HALT"]


@st.composite
def programs(draw):
    """Random valid programs: any strings, consts over them, any non-HALT opcodes, HALT last."""
    strings = tuple(draw(st.lists(st.text(max_size=12), max_size=6)))
    consts = tuple((CONST_STR, draw(st.integers(0, len(strings) - 1)))
                   for _ in range(draw(st.integers(0, 8)))) if strings else ()
    ops = []
    for op in draw(st.lists(st.sampled_from(BODY_OPS), max_size=12)):
        if op.n_operands and not consts:
            continue
        ops.append((op.name, tuple(draw(st.integers(0, len(consts) - 1))
                                   for _ in range(op.n_operands))))
    return Program(VERSION, strings, consts, layout_code(ops + [("HALT", ())]))


@st.composite
def mutated(draw):
    """A valid file, then truncated, bit-flipped, byte-set, spliced or cut-and-joined."""
    data = bytearray(draw(st.sampled_from(SEEDS) | programs().map(encode)))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["truncate", "flip", "set", "splice", "join"]))
        at = draw(st.integers(0, len(data)))
        if kind == "truncate":
            del data[at:]
        elif kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif kind == "splice":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "join":
            other = draw(st.sampled_from(SEEDS))
            data = data[:at] + other[draw(st.integers(0, len(other))):]
    return bytes(data)


@pytest.fixture(scope="module", autouse=True)
def report_counts():
    yield
    print(f"\nSPARK_BC property: {COUNTS['mutated']} mutated inputs, {COUNTS['decoded']} "
          f"decoded, {COUNTS['rejected']} BytecodeError, {COUNTS['escaped']} escaped")


@SETTINGS
@given(mutated())
def test_mutated_bytes_decode_or_raise_bytecode_error(data):
    COUNTS["mutated"] += 1
    try:
        program = decode(data)
    except BytecodeError as err:
        COUNTS["rejected"] += 1
        assert 0 <= err.offset <= len(data)
        assert "\n" not in str(err)
        return
    except Exception:
        COUNTS["escaped"] += 1
        raise
    COUNTS["decoded"] += 1
    assert encode(program) == data


@settings(max_examples=300, deadline=None, database=None)
@given(programs())
def test_random_valid_programs_round_trip(program):
    data = encode(program)
    assert decode(data) == program
    assert encode(decode(data)) == data
    assert len(data) == program.size

