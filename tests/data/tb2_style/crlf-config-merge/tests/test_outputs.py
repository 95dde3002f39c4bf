"""Checks for crlf-config-merge; the image's defaults live under /opt, the expected merge in /tests."""
import configparser
import json
from pathlib import Path

CONF = Path("/srv/config/conf.d")
MERGED = Path("/srv/config/merged.ini")
MERGED_JSON = Path("/srv/config/merged.json")
EXPECTED = Path("/tests/expected.json")
DEFAULTS = Path("/opt/app/defaults.ini")


def test_inputs_keep_crlf():
    for path in (DEFAULTS, CONF / "base.ini", CONF / "site.ini", CONF / "local.ini"):
        assert b"\r\n" in path.read_bytes(), path


def test_merged_ini_format():
    data = MERGED.read_bytes()
    assert b"\r" not in data and data.endswith(b"\n") and not data.endswith(b"\n\n")
    text = data.decode()
    assert ";" not in text and "#" not in text
    blocks = text.strip("\n").split("\n\n")
    names = [b.splitlines()[0] for b in blocks]
    assert names == sorted(names)
    for b in blocks:
        keys = [line.split(" = ")[0] for line in b.splitlines()[1:]]
        assert keys == sorted(keys), b


def test_merged_values():
    expected = json.loads(EXPECTED.read_text())
    parser = configparser.ConfigParser()
    parser.read_string(MERGED.read_text())
    assert {s: dict(parser[s]) for s in parser.sections()} == expected


def test_merged_json():
    assert json.loads(MERGED_JSON.read_text()) == json.loads(EXPECTED.read_text())
