"""A GBNF grammar without recursion, as a Python regular expression, for the tests: what an
answer under the grammar may be is then checked with `re.fullmatch`, and drawn at random with
hypothesis' `from_regex`.  Only the subset `answer_grammar` writes: string literals, character
classes, rule references, groups, `|`, `?`, `*`, `+` and `{m,n}`."""

from __future__ import annotations

import re

_TOKEN = re.compile(r'\s*(?:(?P<lit>"(?:\\.|[^"\\])*")|(?P<cls>\[(?:\\.|[^\]\\])*\])|(?P<name>[A-Za-z0-9-]+)'
                    r"|(?P<rep>\{\d+(?:,\d*)?\})|(?P<op>[()|?*+]))")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]"}


def _unescape(body: str) -> str:
    out, i = [], 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        kind = body[i + 1]
        if kind in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[kind]
            out.append(chr(int(body[i + 2:i + 2 + width], 16)))
            i += 2 + width
        else:
            out.append(_ESCAPES[kind])
            i += 2
    return "".join(out)


def _tokens(body: str) -> list[tuple[str, str]]:
    out, at = [], 0
    while at < len(body.rstrip()):
        m = _TOKEN.match(body, at)
        assert m, f"cannot read {body[at:at + 30]!r}"
        kind = m.lastgroup
        assert kind is not None
        out.append((kind, m.group(kind)))
        at = m.end()
    return out


def to_regex(grammar: str) -> str:
    rules = {}
    for line in grammar.strip().split("\n"):
        name, body = line.split(" ::= ", 1)
        rules[name] = body
    done: dict[str, str] = {}

    def rule(name: str, seen: tuple[str, ...] = ()) -> str:
        assert name not in seen, f"recursive rule {name}"
        if name not in done:
            done[name] = f"(?:{expression(_tokens(rules[name]), (*seen, name))})"
        return done[name]

    def expression(tokens: list[tuple[str, str]], seen: tuple[str, ...]) -> str:
        alternatives: list[str] = [""]
        stack: list[list[str]] = []
        for kind, text in tokens:
            if kind == "lit":
                alternatives[-1] += f"(?:{re.escape(_unescape(text[1:-1]))})"
            elif kind == "cls":
                alternatives[-1] += text  # Python's classes read \xHH and \uHHHH as GBNF does
            elif kind == "name":
                alternatives[-1] += rule(text, seen)
            elif kind == "rep" or text in "?*+":
                alternatives[-1] += text
            elif text == "(":
                stack.append(alternatives)
                alternatives = [""]
            elif text == ")":
                group = "(?:" + "|".join(alternatives) + ")"
                alternatives = stack.pop()
                alternatives[-1] += group
            elif text == "|":
                alternatives.append("")
        return "|".join(alternatives)

    return rule("root")
