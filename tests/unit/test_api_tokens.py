"""The token rules: their forms in the settings, the problems (which never show a token), and
the table that keeps digests only."""

import pytest

from omstream.api_tokens import TokenTable, grants_from_table, grants_from_text, merge_grants
from omstream.settings import SettingsError, load_settings

A, B = "a" * 16, "B-b_b.b~b+b/b-0123"


def test_text_and_table_forms_give_the_same_grants():
    text = grants_from_text(f"{A} = u1, u2 ; {B}=*")
    table = grants_from_table({A: ["u1", "u2"], B: "*"})
    assert dict(text) == dict(table) == {A: {"u1", "u2"}, B: {"*"}}
    assert dict(grants_from_text(f"# comment\n\n{A} = u1\n", unit="line")) == {A: {"u1"}}


@pytest.mark.parametrize(("text", "problem"), [
    ("short = u1", "entry 1: a token is 16"),
    (f"{A} u1", "entry 1: expected TOKEN = RESOURCE"),
    (f"{A} = ", "entry 1: a resource id is a non-empty string"),
    (f"{A} = *, u1", "entry 1: '*' already means every resource"),
    (f"{A} = u1; {A} = u2", "entry 2: this token is given twice"),
    (f"{A}x\u00e9{A} = u1", "entry 1: a token is 16"),
])
def test_each_mistake_names_its_entry_and_never_the_token(text, problem):
    with pytest.raises(ValueError) as caught:
        grants_from_text(text)
    assert str(caught.value).startswith(problem) and A not in str(caught.value)


def test_settings_take_tokens_from_the_file_table_and_the_environment(tmp_path):
    config = tmp_path / "om.toml"
    config.write_text(f'[omstream]\napi_tokens = {{ "{A}" = ["u1"], "{B}" = "*" }}\napi_tokens_file = "t.txt"\n')
    settings = load_settings(config, env={})
    assert dict(settings.api_tokens) == {A: {"u1"}, B: {"*"}} and settings.api_tokens_file == "t.txt"
    assert A not in repr(settings)
    assert dict(load_settings(env={"OM_API_TOKENS": f"{A}=u9"}).api_tokens) == {A: {"u9"}}
    config.write_text('[omstream]\napi_tokens = ["x"]\n')
    with pytest.raises(SettingsError) as caught:
        load_settings(config, env={"OM_API_TOKENS": "tooshort=u1"})
    assert [p.path for p in caught.value.problems] == ["omstream.api_tokens", "OM_API_TOKENS"]


def test_a_token_found_by_its_digest_only():
    table = TokenTable(merge_grants(grants_from_text(f"{A} = u1"), grants_from_text(f"{A} = u2; {B} = *")))
    assert table.grant(A).resources == {"u1", "u2"} and table.grant(A).may_read("u2")
    assert not table.grant(A).may_read(None) and table.grant(B).may_read(None)
    assert table.grant(A + "x") is None and table.grant("") is None
    assert A not in repr(table) and A.encode() not in repr(vars(table)).encode()
