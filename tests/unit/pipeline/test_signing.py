"""Model results carry an HMAC that only the model agents can make (omstream.pipeline.signing)."""

import stat

from omstream.pipeline.signing import HEADER, result_key, sign, signed


def test_a_signature_verifies_only_its_own_bytes_under_its_own_key():
    key, value = b"k" * 32, b'{"type":"model-result"}'
    good = [(HEADER, sign(key, value))]
    assert signed(key, value, good) and signed(key, value, dict(good))
    assert not signed(key, value + b" ", good)
    assert not signed(b"other", value, good)
    assert not signed(key, value, []) and not signed(key, value, None)
    assert not signed(key, value, [("other-header", sign(key, value))])


def test_the_key_is_configured_or_made_once_per_data_dir_and_private(tmp_path):
    assert result_key("configured", tmp_path) == b"configured"
    assert not (tmp_path / "result.key").exists()
    first = result_key("", tmp_path / "data")
    assert len(first) == 64 and result_key("", tmp_path / "data") == first
    mode = (tmp_path / "data" / "result.key").stat().st_mode
    assert stat.S_IMODE(mode) == 0o600


def test_a_fingerprint_names_a_key_without_signing_anything():
    from omstream.pipeline.signing import FINGERPRINT_LABEL, fingerprint

    assert fingerprint(b"k" * 32) == fingerprint(b"k" * 32) != fingerprint(b"j" * 32)
    assert len(fingerprint(b"k")) == 32
    # Not a signature of anything a record could be, and not the key.
    assert fingerprint(b"k").encode() != sign(b"k", FINGERPRINT_LABEL)
    assert "k" * 8 not in fingerprint(b"k" * 32)
