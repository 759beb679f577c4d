"""The documented values of the chart: ``# --`` comments of values.yaml as typed records.

values.yaml documents each value helm-docs style: a comment that starts with ``# --`` directly
above the key, continued on the ``#`` lines below it. A line ``# Example: ...`` is an example;
the others are the description. A key left commented out (an optional value) ends its own
``# --`` comment, followed by a blank line. A map without a ``# --`` comment is a section: the
plain comment directly above it describes it, and each of its keys is documented in turn. The
keys inside a documented value (a map or list default) are its default, not values of their own.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator
from typing import Any

import yaml

_KEY = re.compile(r"(?P<indent> *)(?P<key>[A-Za-z_][A-Za-z0-9_]*):(?P<rest>( .*)?)")
_COMMENT = re.compile(r"(?P<indent> *)#(?P<text>.*)")
_COMMENTED_KEY = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*): \S.*")
_DOC_START = "--"
_EXAMPLE = "Example:"


class ValuesError(Exception):
    """values.yaml breaks a documentation rule; the message names the line and the fix."""


@dataclasses.dataclass(frozen=True)
class Value:
    """One documented value of values.yaml."""

    path: tuple[str, ...]
    """Keys from the top of values.yaml down to this one."""
    description: str
    """The ``# --`` comment without its examples, as one paragraph."""
    examples: tuple[str, ...] = ()
    """The text after each ``Example:`` of the comment."""
    default: object = None
    """The value values.yaml sets (None where it is left commented out)."""
    optional: bool = False
    """Left commented out: the chart sets no default."""

    @property
    def key(self) -> str:
        """The dotted path, ``kubeletPlugin.httpPort``."""
        return ".".join(self.path)


@dataclasses.dataclass(frozen=True)
class Section:
    """A map of values (``image``, ``webhook.tls``), described by its plain comment."""

    path: tuple[str, ...]
    description: str


@dataclasses.dataclass(frozen=True)
class Values:
    """Everything values.yaml documents, in file order."""

    values: tuple[Value, ...]
    sections: tuple[Section, ...]


@dataclasses.dataclass(frozen=True)
class _Comment:
    """One comment line: where it is, how deep, and its text after ``#``."""

    line: int
    indent: int
    text: str


def parse(text: str) -> Values:
    """The values and sections that values.yaml ``text`` documents.

    Raises ValuesError for a key without a comment, a ``# --`` comment that documents no key,
    or a key the scan missed.
    """
    parser = _Parser()
    for number, line in enumerate(text.splitlines(), start=1):
        parser.feed(number, line)
    parser.feed(0, "")
    tree = yaml.safe_load(text) or {}
    result = Values(values=tuple(parser.values), sections=tuple(parser.sections))
    _check_complete(tree, result)
    return _with_defaults(result, tree)


class _Parser:
    """A line scan of values.yaml: a stack of open sections and the comment above the line."""

    def __init__(self) -> None:
        self.values: list[Value] = []
        self.sections: list[Section] = []
        self._stack: list[tuple[int, str]] = []
        self._comments: list[_Comment] = []
        self._value_indent: int | None = None

    def feed(self, number: int, line: str) -> None:
        """Take the next line (number 0 and an empty line: the end of the file)."""
        indent = len(line) - len(line.lstrip(" "))
        if self._value_indent is not None:
            if not line.strip() or indent > self._value_indent:
                return  # part of a documented value's default
            self._value_indent = None
        if not line.strip():
            self._detached()
        elif comment := _COMMENT.fullmatch(line):
            self._comments.append(_Comment(number, len(comment["indent"]), comment["text"]))
        elif key := _KEY.fullmatch(line):
            self._key(number, indent, key["key"], key["rest"])
        else:
            raise ValuesError(f"values.yaml line {number}: not a key, a comment or a blank line")

    def _path(self, indent: int, key: str) -> tuple[str, ...]:
        while self._stack and self._stack[-1][0] >= indent:
            self._stack.pop()
        return (*(k for _, k in self._stack), key)

    def _key(self, number: int, indent: int, key: str, rest: str) -> None:
        blocks = list(_split(self._comments))
        self._comments = []
        path = self._path(indent, key)
        for block in blocks[:-1]:
            if _documents(block):
                self._optional(block)
        last = blocks[-1] if blocks else []
        if last and _documents(last):
            self.values.append(_value(path, last))
            self._value_indent = indent
        elif not rest.strip() or rest.strip().startswith("#"):
            if not last:
                raise ValuesError(
                    f"values.yaml line {number}: {'.'.join(path)} has no comment above it; a"
                    " section of values needs a plain one, a value a `# --` one"
                )
            self.sections.append(Section(path, _paragraph(c.text for c in last)))
            self._stack.append((indent, key))
        else:
            raise ValuesError(
                f"values.yaml line {number}: {'.'.join(path)} has no `# --` comment above it;"
                " describe it there (what it does, an example, why the default)"
            )

    def _detached(self) -> None:
        """A comment followed by a blank line: free text, or the comment of an optional key."""
        for block in _split(self._comments):
            if _documents(block):
                self._optional(block)
        self._comments = []

    def _optional(self, block: list[_Comment]) -> None:
        last = block[-1]
        commented = _COMMENTED_KEY.fullmatch(last.text.strip())
        if not commented or commented["key"] == _EXAMPLE.rstrip(":"):
            raise ValuesError(
                f"values.yaml line {block[0].line}: this `# --` comment documents no key; put"
                " it directly above its key, or end it with the key commented out"
                " (`# key: value`) when the value is optional"
            )
        path = self._path(last.indent, commented["key"])
        self.values.append(dataclasses.replace(_value(path, block[:-1]), optional=True))


def _documents(block: list[_Comment]) -> bool:
    """Whether ``block`` is a ``# --`` comment (not free text)."""
    return block[0].text.lstrip().startswith(_DOC_START)


def _split(comments: list[_Comment]) -> Iterator[list[_Comment]]:
    """The comment lines cut before each ``# --`` line (a leading plain part included)."""
    block: list[_Comment] = []
    for comment in comments:
        if _documents([comment]) and block:
            yield block
            block = []
        block.append(comment)
    if block:
        yield block


def _value(path: tuple[str, ...], block: list[_Comment]) -> Value:
    texts = [c.text.strip() for c in block]
    texts[0] = texts[0].removeprefix(_DOC_START).strip()
    examples = tuple(t.removeprefix(_EXAMPLE).strip() for t in texts if t.startswith(_EXAMPLE))
    prose = (t for t in texts if not t.startswith(_EXAMPLE))
    return Value(path=path, description=_paragraph(prose), examples=examples)


def _paragraph(lines: Iterable[str]) -> str:
    return " ".join(line.strip() for line in lines if line.strip())


def _lookup(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def _with_defaults(values: Values, tree: Any) -> Values:
    return dataclasses.replace(
        values,
        values=tuple(
            v if v.optional else dataclasses.replace(v, default=_lookup(tree, v.path))
            for v in values.values
        ),
    )


def _check_complete(tree: Any, values: Values) -> None:
    """Every key YAML reads is one the scan documented (a key it could not parse is an error)."""
    scanned = {v.path for v in values.values if not v.optional} | {s.path for s in values.sections}
    loaded = set(_loaded_paths(tree, (), {s.path for s in values.sections}))
    if missing := sorted(loaded - scanned):
        raise ValuesError(
            "values.yaml: keys the documentation scan did not find (write them as"
            f" `key: value` on a line of their own): {', '.join('.'.join(p) for p in missing)}"
        )


def _loaded_paths(
    tree: Any, prefix: tuple[str, ...], sections: set[tuple[str, ...]]
) -> Iterator[tuple[str, ...]]:
    for key, value in tree.items():
        path = (*prefix, str(key))
        yield path
        if path in sections and isinstance(value, dict):
            yield from _loaded_paths(value, path, sections)
