"""The bounded readers of YAML and JSON a user (or an attacker) hands us: aliases, merge
keys, duplicate keys, deep nesting, too many values, huge integers and NaN are one line
naming the file (docs/outputs.md, "The bounded loader"; docs/pipeline.md, "Hostile inputs")."""
from __future__ import annotations

import json
import os
import re

import yaml

from sparktrain.core.errors import SparkError
from sparktrain.core.fsutil import read_input

MAX_DEPTH = 64
MAX_INT = 2 ** 63  # a config value beyond this is a typo (and overflows float conversion)
MAX_ITEMS = 1_000_000  # values in one document: a 1024-token BPE tokenizer holds ~10,000
MAX_BYTES = 64 << 20
# PyYAML composes ~10-100 thousand nodes a second: config files and dvc.lock hold hundreds
MAX_YAML_ITEMS = 50_000


class _Refused(Exception):
    def __init__(self, message: str, mark=None):
        super().__init__(message)
        self.mark = mark


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader without aliases, with nesting and value bounds checked node by node."""

    max_items = MAX_ITEMS

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0
        self._items = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _Refused(f"YAML alias *{event.anchor} is not allowed (aliases can expand "
                           f"a small file into an unbounded one)", event.start_mark)
        self._depth += 1
        self._items += 1
        if self._items > self.max_items:
            raise _Refused(f"more than {self.max_items:,} values", self.peek_event().start_mark)
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


def _unique_mapping(loader, node, deep=False):
    first: dict = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise _Refused("YAML merge key << is not supported (write the keys out)",
                           key_node.start_mark)
        key = loader.construct_object(key_node, deep=True)
        try:
            seen = first.setdefault(key, key_node)  # the node, not its line: flow style too
        except TypeError:  # an unhashable key: the constructor below says so
            continue
        if seen is not key_node:
            raise _Refused(f"key {_shown(key)} is given twice (lines {seen.start_mark.line + 1} "
                           f"and {key_node.start_mark.line + 1}); keep one", key_node.start_mark)
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


def _shown(key) -> str:
    text = repr(key)
    return text if len(text) <= 60 else text[:57] + "..."


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _bounded_int)
_BoundedLoader.construct_mapping = _unique_mapping


def _capped(what, limit: int = 200) -> str:
    """At most `limit` characters of a message (it may quote a value), on one line."""
    text = " ".join(str(what).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _where(name: str, mark) -> str:
    return f"{name}:{mark.line + 1}:{mark.column + 1}" if mark is not None else name


# MAX_DEPTH + 1 flow brackets opened with no bracket closed between them
_DEEP_FLOW = re.compile(r"(?:[\[{][^\[\]{}]{0,256}+){%d}" % (MAX_DEPTH + 1))


def load_yaml(text: str | bytes, name: str, max_items: int = MAX_YAML_ITEMS,
              max_bytes: int = MAX_BYTES):
    """The YAML document in `text` (one), or one SparkError line naming `name`."""
    _check_size(text, name, max_bytes)
    body = text if isinstance(text, str) else text.decode("utf-8", "replace")
    deep = _DEEP_FLOW.search(body)
    if deep:  # PyYAML's scanner looks ahead through a flow bomb before any node is composed
        line = text[:deep.start()].count("\n" if isinstance(text, str) else b"\n") + 1
        raise SparkError(f"{name}:{line}: nested deeper than {MAX_DEPTH} levels")
    if body.count(",") + body.count("\n") > max_items:  # the pure-Python parser is slow
        raise SparkError(f"{name}: YAML with more than {max_items:,} values or lines (refused "
                         "before parsing)")
    loader = type("_Loader", (_BoundedLoader,), {"max_items": max_items})
    try:
        return yaml.load(text, Loader=loader)  # noqa: S506 (a SafeLoader subclass)
    except _Refused as err:
        raise SparkError(f"{_where(name, err.mark)}: {_capped(err)}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise SparkError(f"{_where(name, mark)}: not valid YAML "
                         f"({_capped(getattr(err, 'problem', None) or err)})") from None
    except (RecursionError, ValueError, OverflowError) as err:  # a pathological scalar
        raise SparkError(f"{name}: not readable YAML ({type(err).__name__})") from None


def _no_constant(word: str):
    raise _Refused(f"{word} is not a JSON number (only finite numbers are accepted)")


def _check_size(text: str | bytes, name: str, max_bytes: int) -> None:
    if len(text) > max_bytes:
        raise SparkError(f"{name}: {len(text):,} bytes, above the {max_bytes:,}-byte limit "
                         "of this kind of file")


class _Duplicate(Exception):
    def __init__(self, key):
        super().__init__(key)
        self.key = key


def _unique_object(pairs):
    value = dict(pairs)
    if len(value) != len(pairs):
        seen = set()
        raise _Duplicate(next(k for k, _ in pairs if k in seen or seen.add(k)))
    return value


def load_json(text: str | bytes, name: str, max_items: int = MAX_ITEMS,
              max_bytes: int = MAX_BYTES):
    """The JSON value in `text`, or one SparkError line naming `name`."""
    _check_size(text, name, max_bytes)
    # an upper bound on the values and the containers opened, counted in C before parsing
    comma, square, curly = (",", "[", "{") if isinstance(text, str) else (b",", b"[", b"{")
    containers = text.count(square) + text.count(curly)
    if text.count(comma) + containers + 1 > max_items:
        raise SparkError(f"{name}: JSON with more than {max_items:,} values (refused before "
                         "parsing: it would take seconds and gigabytes)")
    try:
        value = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_object)
    except _Duplicate as err:  # the lines where `"key":` appears (the duplicate's two)
        body = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        keys = (json.dumps(err.key, ensure_ascii=False), json.dumps(err.key))
        starts = {m.start() for k in keys for m in re.finditer(re.escape(k) + r"\s*:", body)}
        lines = sorted(body.count("\n", 0, i) + 1 for i in starts)
        where = f" (lines {lines[0]} and {lines[1]})" if len(lines) >= 2 else ""
        raise SparkError(f"{name}: key {_shown(err.key)} is given twice{where}; keep one") from None
    except _Refused as err:
        raise SparkError(f"{name}: {err}") from None
    except RecursionError:
        raise SparkError(f"{name}: JSON nested too deeply") from None
    except UnicodeDecodeError:
        raise SparkError(f"{name} is not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise SparkError(f"{name}: not JSON ({err.msg} at line {err.lineno} column "
                         f"{err.colno})") from None
    except ValueError as err:  # an integer past Python's digit limit
        raise SparkError(f"{name}: not JSON ({str(err).splitlines()[0][:120]})") from None
    if containers > MAX_DEPTH and depth(value) > MAX_DEPTH:  # a JSONL row: rarely walked
        raise SparkError(f"{name}: JSON nested deeper than {MAX_DEPTH} levels")
    return value


def load_json_file(path: str | os.PathLike, what: str, name: str | None = None,
                   max_items: int = MAX_ITEMS):
    """load_json of the file at `path`, a file of kind `what` read within its cap
    (fsutil.read_input: a regular file, never a FIFO); `name`: how a refusal names it
    (default the path)."""
    return load_json(read_input(path, what), os.fspath(path) if name is None else name,
                     max_items=max_items)


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
