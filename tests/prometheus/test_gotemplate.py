"""The Go text/template subset: parsing, execution and Go's value formatting."""

from __future__ import annotations

import pytest

from custom_metrics_server.prometheus.gotemplate import Fields, Template
from custom_metrics_server.prometheus.gotemplate_values import TemplateError, go_format

ARGS = Fields(
    "naming.queryTemplateArgs",
    {
        "Series": "http_requests_total",
        "LabelMatchers": 'namespace="default",pod="web-0"',
        "GroupBy": "pod,container",
        "GroupBySlice": ["pod", "container"],
        "LabelValuesByName": {"pod": "web-0", "namespace": "default"},
    },
)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)",
            'sum(rate(http_requests_total{namespace="default",pod="web-0"}[2m])) by (pod,container)',
        ),
        # Go's %v of a []string and a map[string]string (sorted keys)
        ("<<.GroupBySlice>>", "[pod container]"),
        ("<<.LabelValuesByName>>", "map[namespace:default pod:web-0]"),
        ('<<index .LabelValuesByName "pod">>', "web-0"),
        ('<<index .LabelValuesByName "missing">>', "<no value>"),
        ("<<index .GroupBySlice 1>>", "container"),
        ("<<len .GroupBySlice>>", "2"),
        ("<<range $i, $l := .GroupBySlice>><<if $i>>,<<end>>x_<<$l>><<end>>", "x_pod,x_container"),
        ("<<range .GroupBySlice>>[<<.>>]<<end>>", "[pod][container]"),
        (
            "<<range $k, $v := .LabelValuesByName>><<$k>>=<<$v>>;<<end>>",
            "namespace=default;pod=web-0;",
        ),
        ("<<range .Empty>>x<<else>>none<<end>>", None),
        (
            '<<if eq .Series "a">>A<<else if eq .Series "http_requests_total">>B<<else>>C<<end>>',
            "B",
        ),
        ('<<if ne .Series "http_requests_total">>A<<else>>C<<end>>', "C"),
        ("<<if and .Series (not .GroupBy)>>1<<else>>2<<end>>", "2"),
        (
            '<<printf "%s{%s}" .Series .LabelMatchers>>',
            'http_requests_total{namespace="default",pod="web-0"}',
        ),
        ('<<printf "%q" .Series>>', '"http_requests_total"'),
        ('<<.Series | printf "%s_x">>', "http_requests_total_x"),
        ("<<with .GroupBy>>by (<<.>>)<<end>>", "by (pod,container)"),
        ("a  <<- .Series ->>  b", "ahttp_requests_totalb"),
        ("a<</* a comment */>>b", "ab"),
        ("a <<- /* trimmed comment */ ->> b", "ab"),
        ("<<$x := .Series>><<$x>>", "http_requests_total"),
        ('<<"lit\\"eral">> <<`raw`>> <<1>> <<true>>', 'lit"eral raw 1 true'),
        ("no actions at all", "no actions at all"),
    ],
)
def test_renders_as_go(source: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(
            TemplateError, match="can't evaluate field Empty in type naming.queryTemplateArgs"
        ):
            Template(source).render(ARGS)
        return
    assert Template(source).render(ARGS) == expected


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("<<.Series", "unclosed action"),
        ("<<if .Series>>x", "unclosed if"),
        ("<<end>>", "unexpected {{end}}"),
        ('<<join .GroupBySlice ",">>', 'function "join" not defined'),
        ("<<else>>", "unexpected {{else}}"),
        ("<<>>", "missing value for command"),
        ("<</* unclosed", "unclosed comment"),
        ("<<.Series 1>>", "can't give argument to non-function"),
    ],
)
def test_parse_errors_are_reported_at_load(source: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        Template(source, name="metrics-query")


def test_unknown_field_fails_at_render_with_go_wording() -> None:
    template = Template("<<.Nope>>", name="metrics-query")
    with pytest.raises(TemplateError) as caught:
        template.render(ARGS)
    assert str(caught.value) == (
        "template: metrics-query: can't evaluate field Nope in type naming.queryTemplateArgs"
    )


def test_go_format_matches_fmt_sprint() -> None:
    assert go_format(None) == "<no value>"
    assert go_format(True) == "true"
    assert go_format(["a", "b"]) == "[a b]"
    assert go_format([]) == "[]"
    assert go_format({"b": "2", "a": "1"}) == "map[a:1 b:2]"
    assert go_format({}) == "map[]"
    assert go_format(3) == "3"
