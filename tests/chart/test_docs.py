"""The chart's generated docs: values.yaml's comments, the schema's descriptions, the README table.

No helm needed: the generator is plain Python (``make chart-docs``).
"""

from __future__ import annotations

import json
import pathlib
import shutil
import textwrap
from typing import Any

import pytest

from cdsim import chartdocs, chartvalues
from tests.chart import rendering as r

# -- generated == committed ---------------------------------------------------------------


def test_committed_docs_are_the_generated_ones() -> None:
    stale = chartdocs.stale(r.CHART)
    assert not stale, (
        f"stale: {', '.join(str(p.relative_to(r.REPO)) for p in stale)} differ from what"
        " chart/values.yaml documents; run `make chart-docs`"
    )


def test_check_names_the_stale_file_and_write_fixes_it(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in (chartdocs.VALUES, chartdocs.SCHEMA, chartdocs.README):
        shutil.copy(r.CHART / name, tmp_path / name)
    args = ["--chart-dir", str(tmp_path)]
    assert chartdocs.main(["--check", *args]) == 0
    values = tmp_path / chartdocs.VALUES
    values.write_text(values.read_text().replace("# -- Image repository.", "# -- The image."))
    assert chartdocs.main(["--check", *args]) == 1
    err = capsys.readouterr().err
    for name in (chartdocs.SCHEMA, chartdocs.README):
        assert f"stale: {tmp_path / name} " in err
    assert "run `make chart-docs`" in err
    assert chartdocs.main(["--write", *args]) == 0
    assert chartdocs.main(["--check", *args]) == 0
    schema = json.loads((tmp_path / chartdocs.SCHEMA).read_text())
    assert schema["properties"]["image"]["properties"]["repository"]["description"] == "The image."


def test_the_schema_gains_descriptions_and_nothing_else() -> None:
    def without_descriptions(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: without_descriptions(v) for k, v in node.items() if k != "description"}
        if isinstance(node, list):
            return [without_descriptions(v) for v in node]
        return node

    schema = json.loads((r.CHART / chartdocs.SCHEMA).read_text())
    values = chartvalues.parse((r.CHART / chartdocs.VALUES).read_text())
    described = chartdocs.describe_schema(schema, values)
    assert without_descriptions(described) == without_descriptions(schema)
    pull_policy = described["properties"]["image"]["properties"]["pullPolicy"]
    assert pull_policy["enum"] == ["Always", "IfNotPresent", "Never"]
    assert pull_policy["description"].startswith("Kubernetes image pull policy.")


# -- the comment parser -------------------------------------------------------------------

VALUES = textwrap.dedent(
    """\
    # Values of a chart: free text, detached by the blank line below.

    # -- Replicas of the thing. Two, so one may
    # crash.
    # Example: replicas: 3   (three)
    replicas: 2

    # The section's own comment.
    outer:
      # A nested section.
      inner:
        # -- Taints tolerated.
        tolerations:
          - key: a
            operator: Exists

        # -- Slots per node. Unset: the program's default.
        # Example: slots: 8
        # slots: 8

      # -- Labels.
      labels: {}
    """
)


def test_parse_reads_multi_line_comments_examples_and_nesting() -> None:
    values = chartvalues.parse(VALUES)
    by_key = {v.key: v for v in values.values}
    assert list(by_key) == [
        "replicas",
        "outer.inner.tolerations",
        "outer.inner.slots",
        "outer.labels",
    ]
    replicas = by_key["replicas"]
    assert replicas.description == "Replicas of the thing. Two, so one may crash."
    assert replicas.examples == ("replicas: 3   (three)",)
    assert replicas.default == 2 and not replicas.optional
    assert by_key["outer.inner.tolerations"].default == [{"key": "a", "operator": "Exists"}]
    slots = by_key["outer.inner.slots"]
    assert slots.optional and slots.default is None
    assert slots.description == "Slots per node. Unset: the program's default."
    assert [(s.path, s.description) for s in values.sections] == [
        (("outer",), "The section's own comment."),
        (("outer", "inner"), "A nested section."),
    ]


def test_parse_takes_free_text_above_a_comment_and_an_optional_key_above_a_key() -> None:
    text = "# Free text.\n# -- Optional.\n# a: 1\n# -- Set.\nb: 2\n"
    values = chartvalues.parse(text)
    assert [(v.key, v.description, v.optional) for v in values.values] == [
        ("a", "Optional.", True),
        ("b", "Set.", False),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# -- Documented.\na: 1\nb: 2\n", "line 3: b has no `# --` comment above it"),
        ("# Plain.\na: 1\n", "line 2: a has no `# --` comment above it"),
        ("a:\n  b: 1\n", "line 1: a has no comment above it"),
        ("# -- Lost.\n\n# -- Documented.\na: 1\n", "line 1: this `# --` comment documents no key"),
        ("# -- Documented.\na: 1\n- b\n", "line 3: not a key, a comment or a blank line"),
    ],
)
def test_parse_refuses_what_it_cannot_document(text: str, message: str) -> None:
    with pytest.raises(chartvalues.ValuesError, match=message):
        chartvalues.parse(text)


# -- schema and table ---------------------------------------------------------------------

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "replicas": {"type": "integer", "minimum": 1, "maximum": 10},
        "outer": {
            "type": "object",
            "properties": {
                "inner": {
                    "type": "object",
                    "properties": {
                        "tolerations": {"type": "array"},
                        "slots": {"$ref": "#/definitions/slots"},
                    },
                },
                "labels": {"type": "object", "description": "Written by hand."},
            },
        },
    },
    "definitions": {"slots": {"oneOf": [{"type": "integer"}, {"type": "string"}]}},
}


def test_describe_schema_writes_each_comment_and_keeps_the_rest() -> None:
    described = chartdocs.describe_schema(SCHEMA, chartvalues.parse(VALUES))
    outer = described["properties"]["outer"]
    assert list(outer) == ["type", "description", "properties"]
    assert outer["properties"]["labels"] == {"type": "object", "description": "Labels."}
    assert outer["properties"]["inner"]["properties"]["slots"] == {
        "$ref": "#/definitions/slots",
        "description": "Slots per node. Unset: the program's default.",
    }
    assert described["properties"]["replicas"]["maximum"] == 10
    assert "description" not in SCHEMA["properties"]["replicas"], "the input is not changed"


def test_describe_schema_refuses_a_declared_key_without_a_comment() -> None:
    schema = json.loads(json.dumps(SCHEMA))
    schema["properties"]["outer"]["properties"]["extra"] = {"type": "string"}
    with pytest.raises(chartdocs.ChartDocsError, match=r"declares outer\.extra, which values"):
        chartdocs.describe_schema(schema, chartvalues.parse(VALUES))


def test_table_rows_carry_type_range_default_and_examples() -> None:
    values = chartvalues.parse(VALUES)
    lines = chartdocs.table(chartdocs.rows(values, SCHEMA)).splitlines()
    assert lines[0] == chartdocs.BEGIN and lines[-1] == chartdocs.END
    assert lines[3] == (
        "| `replicas` | integer (1 to 10) | `2` | Replicas of the thing. Two, so one may crash."
        " Example: `replicas: 3` (three) |"
    )
    assert lines[4].startswith(
        "| `outer.inner.tolerations` | array | `[{key: a, operator: Exists}]` |"
    )
    assert lines[5].startswith("| `outer.inner.slots` | integer or string | unset |")


def test_splice_keeps_the_hand_written_text_and_needs_the_markers() -> None:
    readme = f"intro\n{chartdocs.BEGIN}\nold\n{chartdocs.END}\noutro\n"
    assert chartdocs.splice(readme, "new") == "intro\nnew\noutro\n"
    with pytest.raises(chartdocs.ChartDocsError, match="no generated values table"):
        chartdocs.splice("intro\n", "new")
