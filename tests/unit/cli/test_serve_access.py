"""`om serve` off loopback without tokens stops before anything (no broker needed): one line
naming the settings, exit 1; a bad tokens file is a `path: problem` line."""

from omstream.cli import main


def test_serve_on_a_network_address_without_tokens_is_refused(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("OM_WEB_HOST", "0.0.0.0")
    monkeypatch.setenv("OM_BOOTSTRAP", "127.0.0.1:1")  # nothing listens: the check comes first
    assert main(["serve"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("om serve: omstream.web_host '0.0.0.0' is not a loopback")
    assert "OM_API_TOKENS" in err and "api_tokens_file" in err
    tokens = tmp_path / "tokens"
    tokens.write_text("too-short = alice\n")
    monkeypatch.setenv("OM_API_TOKENS_FILE", str(tokens))
    assert main(["serve"]) == 1
    assert capsys.readouterr().err == f"{tokens}: line 1: a token is 16 to 512 letters, digits or . _ ~ + / - " \
        "(e.g. python -c 'import secrets; print(secrets.token_urlsafe())')\n"
