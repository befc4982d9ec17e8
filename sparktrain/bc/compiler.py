"""compile_source(.spark text) -> SPARK_BC bytes, byte-exact with the original toolchain.

A line's first word picks its parser (STATEMENTS), which returns (opcode name, operand
strings); strings are interned into one pool on first use, const i == STR string i."""
from __future__ import annotations

import re
from typing import Callable, NamedTuple

from sparktrain.bc.codec import encode
from sparktrain.bc.program import (BY_NAME, CONST_STR, MAX_INSTRUCTIONS, VERSION, Program,
                                   layout_code)
from sparktrain.core.errors import SourceError

# The original toolchain interns these operands bind-first; matching it keeps
# our bytes (and so every sha256 downstream) identical to its output.
INTERN_LAST_TO_FIRST = frozenset({"TRAIN", "STEP", "TRAIN_STATUS"})

U16_MAX = 0xFFFF

# A word may hold '-' only between word characters, so `job->x` is `job` `->` `x`.
_WORD = re.compile(r"[A-Za-z0-9_./]+(?:-[A-Za-z0-9_./]+)*")
_SPACE = re.compile(r"[ \t\r\f\v]+")
_ESCAPES = {'"': '"', "\\": "\\"}


class Token(NamedTuple):
    kind: str      # "word", "string", "arrow", "end"
    text: str      # a word, or a string's unescaped value
    col: int       # 1-based column of its first character


class Where(NamedTuple):
    filename: str
    line: int


def _error(where: Where, col: int, message: str) -> SourceError:
    return SourceError(message, where.filename, where.line, col)


def _read_string(line: str, start: int, where: Where) -> tuple[str, int]:
    """The string literal opening at line[start] == '"' -> (value, index after it)."""
    out, i = [], start + 1
    while i < len(line):
        ch = line[i]
        if ch == '"':
            return "".join(out), i + 1
        if ch == "\\":
            nxt = line[i + 1:i + 2]
            if nxt not in _ESCAPES:
                shown = f"\\{nxt}" if nxt else "\\ at end of line"
                raise _error(where, i + 1, f'bad escape {shown}; only \\" and \\\\ are escapes '
                                           "in a string")
            ch = _ESCAPES[nxt]
            i += 1
        out.append(ch)
        i += 1
    raise _error(where, start + 1, 'unterminated string; close it with " on the same line')


def tokenize(line: str, where: Where) -> list[Token]:
    """Tokens of one line, comments dropped, ending with an "end" token."""
    tokens, i = [], 0
    while i < len(line):
        if (m := _SPACE.match(line, i)):
            i = m.end()
        elif line[i] == "#":
            break
        elif line.startswith("->", i):
            tokens.append(Token("arrow", "->", i + 1))
            i += 2
        elif line[i] == '"':
            value, end = _read_string(line, i, where)
            tokens.append(Token("string", value, i + 1))
            i = end
        elif (m := _WORD.match(line, i)):
            tokens.append(Token("word", m.group(), i + 1))
            i = m.end()
        else:
            raise _error(where, i + 1, f"unexpected character {line[i]!r}")
    tokens.append(Token("end", "", i + 1))    # at the comment, or just past the line
    return tokens


def _shown(tok: Token) -> str:
    return {"end": "end of line", "string": f'"{tok.text}"'}.get(tok.kind, repr(tok.text))


class Tokens:
    """The tokens of one statement, consumed left to right by its parser."""

    def __init__(self, tokens: list[Token], where: Where):
        self.tokens, self.i, self.where = tokens, 0, where

    def peek(self) -> Token:
        return self.tokens[self.i]

    def next(self, kind: str, what: str) -> Token:
        tok = self.peek()
        if tok.kind != kind:
            raise _error(self.where, tok.col, f"expected {what}, found {_shown(tok)}")
        self.i += 1
        return tok

    def bind(self, statement: str) -> str:
        if self.peek().kind != "arrow":
            raise _error(self.where, self.peek().col,
                         f"missing `-> bind` after {statement}; name the result, e.g. `-> job`")
        self.i += 1
        return self.next("word", "a bind name after ->").text

    def end(self) -> None:
        tok = self.peek()
        if tok.kind != "end":
            raise _error(self.where, tok.col, f"trailing junk {_shown(tok)} after the statement; "
                                              "one statement per line")


Parsed = tuple[str, tuple[str, ...]]        # (opcode name, operand strings in operand order)


# model train/build: keyword -> string pairs, in any order; backend is dropped.
TRAIN_KEYWORDS = ("dataset", "base", "out", "method")
DROPPED_KEYWORDS = ("backend",)


def _parse_train(t: Tokens, statement: str) -> Parsed:
    seen: dict[str, str] = {}
    while t.peek().kind == "word":
        key = t.peek()
        if key.text not in TRAIN_KEYWORDS + DROPPED_KEYWORDS:
            raise _error(t.where, key.col, f"unknown keyword {key.text!r} in {statement}; "
                         f"expected one of: {', '.join(TRAIN_KEYWORDS + DROPPED_KEYWORDS)}")
        if key.text in seen:
            raise _error(t.where, key.col, f"keyword `{key.text}` given twice")
        t.i += 1
        seen[key.text] = t.next("string", f'a "..." string after `{key.text}`').text
    for key in TRAIN_KEYWORDS:
        if key not in seen:
            raise _error(t.where, t.peek().col,
                         f'missing keyword `{key}` in {statement}; add {key} "..."')
    bind = t.bind(statement)
    return "TRAIN", tuple(seen[k] for k in TRAIN_KEYWORDS) + (bind,)


def _parse_job(opcode: str, statement: str) -> Callable[[Tokens], Parsed]:
    def parse(t: Tokens) -> Parsed:
        job = t.next("string", f'a "JOB" id after {statement}').text
        return opcode, (job, t.bind(statement))
    return parse


# `model` followed by one of these words is a train-family statement.
MODEL_VERBS: dict[str, Callable[[Tokens], Parsed]] = {
    "train": lambda t: _parse_train(t, "model train"),
    "build": lambda t: _parse_train(t, "model build"),
    "step": _parse_job("STEP", "model step"),
    "status": _parse_job("TRAIN_STATUS", "model status"),
}


def _parse_model(t: Tokens) -> Parsed:
    word = t.next("word", "a model NAME or train/build/step/status")
    verb = MODEL_VERBS.get(word.text)
    return verb(t) if verb else ("MODEL", (word.text,))


# a statement's first word -> its parser; operands are read left to right
STATEMENTS: dict[str, Callable[[Tokens], Parsed]] = {
    "model": _parse_model,
    "ask": lambda t: ("ASK", (t.next("string", 'a "PROMPT" string').text, t.bind("ask"))),
    "let": lambda t: ("LET", (t.next("word", "a NAME").text,
                              t.next("string", 'a "VALUE" string').text)),
    "print": lambda t: ("PRINT", (t.next("word", "a NAME to print").text,)),
}


def parse_line(line: str, where: Where) -> Parsed | None:
    """One source line -> (opcode name, operand strings), or None for a blank/comment line."""
    t = Tokens(tokenize(line, where), where)
    head = t.peek()
    if head.kind == "end":
        return None
    parser = STATEMENTS.get(head.text) if head.kind == "word" else None
    if parser is None:
        raise _error(where, head.col, f"unknown statement {_shown(head)}; expected one of: "
                                      f"{', '.join(STATEMENTS)}")
    t.i += 1
    parsed = parser(t)
    t.end()
    return parsed


class Pool:
    """Strings interned on first use; const i is always STR -> string i."""

    def __init__(self):
        self.index: dict[str, int] = {}

    def intern(self, text: str, where: Where) -> int:
        if text not in self.index:
            if len(text.encode("utf-8")) > U16_MAX:
                raise _error(where, 1, f"string of {len(text.encode('utf-8'))} bytes is over "
                                       f"the {U16_MAX}-byte limit of SPARK_BC")
            if len(self.index) == U16_MAX:         # nstrings is a u16
                raise _error(where, 1, f"more than {U16_MAX} distinct strings")
            self.index[text] = len(self.index)
        return self.index[text]

    def operands(self, opcode: str, values: tuple[str, ...], where: Where) -> tuple[int, ...]:
        order = range(len(values))
        interning = reversed(order) if opcode in INTERN_LAST_TO_FIRST else order
        indices = {k: self.intern(values[k], where) for k in interning}
        return tuple(indices[k] for k in order)


def compile_program(text: str, filename: str = "<source>") -> Program:
    pool, ops = Pool(), []
    # split("\n"), not splitlines(): a U+2028 inside a string is text, not a line break.
    for lineno, line in enumerate(text.split("\n"), start=1):
        where = Where(filename, lineno)
        parsed = parse_line(line.removesuffix("\r"), where)
        if parsed is None:
            continue
        opcode, values = parsed
        assert BY_NAME[opcode].n_operands == len(values)
        if len(ops) + 1 >= MAX_INSTRUCTIONS:       # HALT takes the last slot
            raise _error(where, 1, f"more than {MAX_INSTRUCTIONS} instructions in one program")
        ops.append((opcode, pool.operands(opcode, values, where)))
    ops.append(("HALT", ()))
    strings = tuple(pool.index)             # dicts keep insertion (= interning) order
    consts = tuple((CONST_STR, i) for i in range(len(strings)))
    return Program(VERSION, strings, consts, layout_code(ops))


def compile_source(text: str, filename: str = "<source>") -> bytes:
    return encode(compile_program(text, filename))
