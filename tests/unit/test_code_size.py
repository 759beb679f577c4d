"""Modules of at most 400 lines and functions of at most 60, or a reason where one is larger.

A module states its reason in a line ``# size: <why>`` of its own; a function in that line
right above its ``def`` (or above its decorators). Generated modules (``drapb``) are not ours
to size.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
TREES = ("src/computedomains", "hooks", "node-init")
"""The product: what the wheel and the image carry."""
MODULE_LINES = 400
FUNCTION_LINES = 60
REASON = "# size: "


def _modules() -> list[pathlib.Path]:
    return sorted(
        p
        for tree in TREES
        for p in (REPO / tree).rglob("*.py")
        if "drapb" not in p.parts or p.name == "generate.py"
    )


def _reasoned(lines: list[str], first: int) -> bool:
    """Whether the line above line ``first`` (1-based), past decorators, gives a reason."""
    above = first - 2
    while above >= 0 and lines[above].strip().startswith("@"):
        above -= 1
    return above >= 0 and lines[above].strip().startswith(REASON)


def oversized(path: pathlib.Path) -> list[str]:
    """What in ``path`` is over its bound without a reason, one line each."""
    text = path.read_text()
    lines = text.splitlines()
    found = []
    if len(lines) > MODULE_LINES and not any(line.startswith(REASON) for line in lines):
        found.append(f"{len(lines)} lines")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if length > FUNCTION_LINES and not _reasoned(lines, first):
                found.append(f"{node.name}() {length} lines (line {node.lineno})")
    return found


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_module_and_functions_within_bounds_or_reasoned(path: pathlib.Path) -> None:
    found = oversized(path)
    assert not found, (
        f"{path.relative_to(REPO)}: {'; '.join(found)}: split it along its seams, or say why "
        f"not in a '{REASON}<why>' line (module: anywhere; function: right above it)"
    )


def test_a_long_function_without_a_reason_is_found(tmp_path: pathlib.Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    plain = tmp_path / "plain.py"
    plain.write_text(f"def long() -> None:\n{body}\n")
    assert oversized(plain) == [f"long() {FUNCTION_LINES + 1} lines (line 1)"]
    reasoned = tmp_path / "reasoned.py"
    reasoned.write_text(f"{REASON}one table\n@staticmethod\ndef long() -> None:\n{body}\n")
    assert oversized(reasoned) == []
