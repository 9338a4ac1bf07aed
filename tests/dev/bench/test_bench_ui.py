"""bench/ui.py times the asset pages with the UI's own GraphQL queries: they must be found, whole and valid.

Pure: reads the installed dagster-webserver's UI bundle and checks each query against
dagster-graphql's schema, so a Dagster upgrade that renames or reshapes a query fails here,
not halfway through a ten-minute benchmark. No server is started.
"""

import pytest
from graphql import parse, validate
from matos_dev.bench import ui


@pytest.fixture(scope="module")
def definitions():
    return ui.ui_definitions()


@pytest.fixture(scope="module")
def schema():
    from dagster_graphql.schema import create_schema

    return create_schema().graphql_schema


@pytest.mark.parametrize("name", sorted({q for qs in ui.PAGES.values() for q in qs}))
def test_each_page_query_is_in_the_ui_bundle_with_its_fragments_and_valid_for_the_schema(definitions, schema, name):
    document = ui.ui_query(definitions, name)
    assert document.lstrip().startswith(f"query {name}")
    errors = validate(schema, parse(document))
    assert not errors, [e.message for e in errors]


def test_a_query_the_bundle_does_not_have_is_refused_naming_where_to_change(definitions):
    with pytest.raises(RuntimeError, match="NoSuchPageQuery is not in dagster-webserver's UI bundle.*PAGES"):
        ui.ui_query(definitions, "NoSuchPageQuery")


def test_fragments_are_joined_transitively():
    definitions = {
        ("query", "Q"): "query Q { a { ...F } }",
        ("fragment", "F"): "fragment F on A { b { ...G } }",
        ("fragment", "G"): "fragment G on B { c }",
        ("fragment", "Unused"): "fragment Unused on B { d }",
    }
    assert ui.ui_query(definitions, "Q").split("\n") == [
        "query Q { a { ...F } }", "fragment F on A { b { ...G } }", "fragment G on B { c }"]


def test_a_js_literal_with_several_definitions_is_split_at_their_braces():
    text = "\n  query Q($k: String!) {\n    a(k: $k) { b { c } }\n  }\n\n  fragment F on A {\n    d\n  }\n"
    assert [(kind, name) for kind, name, _ in ui._split(text)] == [("query", "Q"), ("fragment", "F")]
    assert list(ui._split(text))[0][2].endswith("b { c } }\n  }")
