"""The interpreter, with fake handlers standing in for the train area."""
import io
import json

import pytest

from sparktrain.bc.compiler import compile_program
from sparktrain.bc.program import Program, layout_code
from sparktrain.bc.codec import EXECUTABLE, execute
from sparktrain.core.errors import SparkError

SOURCE = """model code
model train dataset "d.jsonl" base "fixture-base" out "out/train/job-1" method "spark_distill_cpu" -> job
model step "job-1" -> step
model status "job-1" -> status
let note "done"
print job
print note
"""


class FakeHandlers(dict):
    """Records each call; returns a dict that names the call."""

    def __init__(self):
        super().__init__(TRAIN=self.make("TRAIN"), STEP=self.make("STEP"),
                         TRAIN_STATUS=self.make("TRAIN_STATUS"))
        self.calls = []

    def make(self, name):
        def handler(ins, values):
            self.calls.append((name, ins.offset, values))
            return {"op": name, "job": values[0] if name != "TRAIN" else values[2], "n": 1.5}
        return handler


def test_runs_train_family_through_handlers_and_prints_json_lines():
    handlers, out = FakeHandlers(), io.StringIO()
    bindings = execute(compile_program(SOURCE), handlers, out)
    assert [c[0] for c in handlers.calls] == ["TRAIN", "STEP", "TRAIN_STATUS"]
    assert handlers.calls[0][2] == ("d.jsonl", "fixture-base", "out/train/job-1",
                                    "spark_distill_cpu", "job")
    assert handlers.calls[1][2] == ("job-1", "step")
    assert set(bindings) == {"job", "step", "status", "note"}
    assert bindings["step"] == {"op": "STEP", "job": "job-1", "n": 1.5}
    assert bindings["note"] == "done"
    lines = out.getvalue().splitlines()
    assert lines == [
        '{"job":"out/train/job-1","n":1.5,"op":"TRAIN"}',
        '{"job":"job-1","n":1.5,"op":"STEP"}',
        '{"job":"job-1","n":1.5,"op":"TRAIN_STATUS"}',
        '{"job":"out/train/job-1","n":1.5,"op":"TRAIN"}',     # print job
        "done",                                               # print note: a string as-is
    ]
    assert all(json.loads(line) for line in lines[:4])


def test_default_out_is_stdout_at_call_time(capsys):
    execute(compile_program('let a "x"\nprint a\n'), {})
    assert capsys.readouterr().out == "x\n"


def test_non_executable_opcode_is_named_before_anything_runs():
    program = compile_program('model step "j" -> s\nask "hello?" -> answer\n')
    handlers, out = FakeHandlers(), io.StringIO()
    with pytest.raises(SparkError) as info:
        execute(program, handlers, out)
    assert str(info.value).startswith(
        "opcode ASK (0x02) at code+5 is not executable by spark; executable: ")
    for name in EXECUTABLE:
        assert name in str(info.value)
    assert handlers.calls == [] and out.getvalue() == ""


def test_every_other_opcode_is_refused_with_its_offset():
    program = Program(1, ("x",), ((0, 0),),
                      layout_code([("LET", (0, 0)), ("TOOL", (0,)), ("HALT", ())]))
    with pytest.raises(SparkError, match=r"opcode TOOL \(0x20\) at code\+5 "):
        execute(program, {}, io.StringIO())


def test_print_of_unbound_name_is_an_error_before_anything_runs():
    handlers, out = FakeHandlers(), io.StringIO()
    with pytest.raises(SparkError, match="PRINT at code\\+5 prints 'job'"):
        execute(compile_program('model step "j" -> s\nprint job\nlet job "late"\n'),
                handlers, out)
    assert handlers.calls == []


def test_missing_handler_is_a_spark_error():
    with pytest.raises(SparkError, match="STEP at code\\+0 has no handler"):
        execute(compile_program('model step "j" -> s\n'), {}, io.StringIO())


def test_handler_error_stops_the_run():
    def failing(ins, values):
        raise SparkError("dataset missing")
    handlers = FakeHandlers()
    handlers["TRAIN"] = failing
    out = io.StringIO()
    with pytest.raises(SparkError, match="dataset missing"):
        execute(compile_program(SOURCE), handlers, out)
    assert handlers.calls == [] and out.getvalue() == ""


def test_model_and_let_need_no_handlers():
    assert execute(compile_program('model code\nlet a "1"\nlet a "2"\n'), {}, io.StringIO()) \
        == {"a": "2"}
