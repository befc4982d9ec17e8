"""The readers for text a user (or an attacker) hands us: YAML and JSON, bounded.

Both refuse, in one line naming the file, what would make a small file expensive:

- YAML aliases (`*name`): an alias bomb expands a few hundred bytes into
  billions of nodes. A config file never needs them; anchors alone are harmless.
- YAML integers beyond 2**63 (no setting needs one; converting one to float overflows);
- nesting deeper than MAX_DEPTH (a recursion error in the parser, or later in
  whatever walks the document);
- JSON's non-standard `NaN`, `Infinity` and `-Infinity` (a NaN compares false
  against every bound, so it slips through range checks), and integers longer
  than Python's conversion limit.

Size caps are the caller's, through fsutil.read_input (params.yaml: 1 MiB). See
docs/pipeline.md ("Hostile inputs").
"""
from __future__ import annotations

import json

import yaml

from sparktrain.errors import SparkError

MAX_DEPTH = 64
MAX_INT = 2 ** 63  # a config value beyond this is a typo (and overflows float conversion)


class _Refused(Exception):
    def __init__(self, message: str, mark=None):
        super().__init__(message)
        self.mark = mark


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader without aliases and with a nesting bound, checked as nodes are composed."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(f"YAML alias *{event.anchor} is not allowed (aliases can expand "
                           f"a small file into an unbounded one)", event.start_mark)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels",
                               self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _bounded_int(loader, node):
    value = yaml.SafeLoader.construct_yaml_int(loader, node)
    if abs(value) > MAX_INT:
        raise _Refused(f"integer {node.value[:24]}... is out of range (beyond 2**63)",
                       node.start_mark)
    return value


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _bounded_int)


def _where(name: str, mark) -> str:
    return f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else name


def load_yaml(text: str | bytes, name: str):
    """The YAML document in `text` (one), or one SparkError line naming `name`."""
    try:
        return yaml.load(text, Loader=_BoundedLoader)  # noqa: S506 (a SafeLoader subclass)
    except _Refused as err:
        raise SparkError(f"{_where(name, err.mark)}: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise SparkError(f"{_where(name, mark)}: not valid YAML "
                         f"({getattr(err, 'problem', None) or err})") from None
    except (RecursionError, ValueError, OverflowError) as err:  # a pathological scalar
        raise SparkError(f"{name}: not readable YAML ({type(err).__name__})") from None


def _no_constant(word: str):
    raise _Refused(f"{word} is not a JSON number (only finite numbers are accepted)")


def load_json(text: str | bytes, name: str):
    """The JSON value in `text`, or one SparkError line naming `name`."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except _Refused as err:
        raise SparkError(f"{name}: {err}") from None
    except RecursionError:
        raise SparkError(f"{name}: JSON nested too deeply") from None
    except UnicodeDecodeError:
        raise SparkError(f"{name} is not UTF-8 text") from None
    except ValueError as err:  # JSONDecodeError, or an integer past the digit limit
        raise SparkError(f"{name} is not JSON ({str(err).splitlines()[0][:120]})") from None
    if depth(value) > MAX_DEPTH:
        raise SparkError(f"{name}: JSON nested deeper than {MAX_DEPTH} levels")
    return value


def depth(value) -> int:
    """Nesting depth of a JSON-like value (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            level += 1
            deepest = max(deepest, level)
            if deepest > MAX_DEPTH:
                return deepest
            stack.extend((child, level) for child in node)
    return deepest
