"""http.protocol.node_names_text: the NodeNames array's bytes, given only when they alone decide the list.

The engine takes equal text for an equal list it has already proved to fit (engine/filtering.py
``_all_fit``), so a text that is not exactly the source of ``body["NodeNames"]`` would let a forged
request through unchecked. The property: whenever the function answers, the text parses to the very
list the whole body parses to, for bodies built to confuse it (duplicate keys, escaped and nested
look-alike keys, strings holding the key, whitespace, other member orders).
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.http.protocol import node_names_text, parse_filter_args

POD = {"metadata": {"name": "p", "namespace": "default", "uid": "u"}, "spec": {"containers": []}}


def kube_scheduler_body(names: list[str]) -> bytes:
    """As kube-scheduler's json.Encoder writes ExtenderArgs: compact, struct order, a trailing newline."""
    return orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": names}) + b"\n"


def test_the_text_of_what_kube_scheduler_sends() -> None:
    body = kube_scheduler_body(["node-1", "node-2"])
    assert node_names_text(body) == b'["node-1","node-2"]'
    assert node_names_text(kube_scheduler_body([])) == b"[]"
    args = parse_filter_args(orjson.loads(body), data=body)
    assert args.names_text == b'["node-1","node-2"]' and args.node_names == ["node-1", "node-2"]


@pytest.mark.parametrize("body", [
    b'{"Pod":{},"NodeNames": ["a"]}',                                  # a space: not the canonical form
    b'{"NodeNames":["a"],"Pod":{}}',                                   # not the last member
    b'{"Pod":{},"Node\\u004eames":["a"]}',                             # the key escaped
    b'{"Pod":{"x\\"NodeNames":["a"]},"NodeNames":["b"],"Nodes":null}',  # a look-alike key, then not last
    b'{"Pod":{},"x\\"NodeNames":["a"]}',                               # the look-alike key is last
    b'{"Pod":{},"NodeNames":["a",["b"]]}',                             # nested array
    b'{"Pod":{},"NodeNames":["a",{"b":1}]}',                           # nested object
    b'{"Pod":{},"NodeNames":["a[b"]}',                                 # a bracket in a name: refused, not guessed
    b'{"Pod":{"NodeNames":["a"]},"Node\\u004eames":["b"]}',            # the only spelled key is nested
    b'{"Pod":{},"NodeNames":["evil"],"Q":[{"x":1,"NodeNames":["a"]}]}',  # a nested look-alike ends the body
    b'{"Pod":{},"NodeNames":["evil"],"Q":{"NodeNames":["a"]}}',        # the same, one level less
    b'{"Pod":{},"NodeNames":["a]"]}',                                  # a closing bracket in a name
    b'{"Pod":{},"NodeNames":["a}"]}',                                  # a brace in a name
])
def test_no_text_unless_it_alone_decides_the_list(body: bytes) -> None:
    orjson.loads(body)  # each is valid JSON: what the handler would have parsed
    assert node_names_text(body) is None


def test_a_full_nodes_request_has_no_names_text() -> None:
    body = orjson.dumps({"Pod": POD, "Nodes": {"items": [{"metadata": {"name": "a"}}]}, "NodeNames": None})
    assert parse_filter_args(orjson.loads(body), data=body).names_text is None


NAMES = st.lists(st.sampled_from(["a", "b", "node-1", 'q"NodeNames":[', "x]", "y,", "z{"]), max_size=4)
KEYS = st.sampled_from(["NodeNames", "Pod", "Nodes", 'x"NodeNames', "NodeNames\\", "Node\u004eames"])
SCALARS = st.one_of(st.none(), st.integers(-(2**40), 2**40), st.text(alphabet='NodeNames"[]{},:\\ ', max_size=12))
LOOK_ALIKES = st.one_of(  # a NodeNames member nested at the end of another value: it ends the body too
    st.builds(lambda pre, names: [*pre, ("NodeNames", names)], st.lists(st.tuples(KEYS, SCALARS), max_size=2), NAMES),
    st.builds(lambda pre, names: [[*pre, ("NodeNames", names)]], st.lists(st.tuples(KEYS, SCALARS), max_size=2),
              NAMES))
VALUES = st.recursive(st.one_of(SCALARS, NAMES, LOOK_ALIKES), lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)), max_leaves=8)


def _encode(value: Any, spaced: bool, escape: bool) -> bytes:
    """JSON by hand, so keys can repeat, be escaped, and separators vary."""
    if isinstance(value, list) and value and all(isinstance(v, tuple) for v in value):  # an object as pairs
        sep = b", " if spaced else b","
        return b"{" + sep.join(_key(k, escape) + b":" + _encode(v, spaced, escape) for k, v in value) + b"}"
    if isinstance(value, list):
        return b"[" + b",".join(_encode(v, spaced, escape) for v in value) + b"]"
    if isinstance(value, dict):
        return _encode(list(value.items()) or [("k", None)], spaced, escape)
    return orjson.dumps(value)


def _key(key: str, escape: bool) -> bytes:
    text = orjson.dumps(key)
    return text.replace(b"N", b"\\u004e", 1) if escape else text


@settings(max_examples=400, deadline=None)
@given(members=st.lists(st.tuples(KEYS, VALUES), min_size=1, max_size=5), last=st.one_of(NAMES, VALUES),
       last_key=KEYS, spaced=st.booleans(), escape=st.booleans(), trailing=st.sampled_from([b"", b"\n", b" \n"]))
def test_the_text_parses_to_the_list_the_body_parses_to(members: list[tuple[str, Any]], last: Any,
                                                         last_key: str, spaced: bool, escape: bool,
                                                         trailing: bytes) -> None:
    body = _encode([*members, (last_key, last)], spaced, escape) + trailing
    parsed = orjson.loads(body)
    text = node_names_text(body)
    if text is not None:
        assert orjson.loads(text) == parsed["NodeNames"]
    elif last_key == "NodeNames" and not spaced and not escape and isinstance(last, list):
        # the canonical form: the text is given unless an element holds a bracket or a brace
        assert any(not isinstance(v, str) or set(v) & set("[]{}") for v in last), body
