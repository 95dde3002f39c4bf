"""Checks for service-healthcheck: the service is started by test.sh on port 8088 (loopback only)."""
import json
import subprocess
import urllib.error
import urllib.request

BASE = "http://127.0.0.1:8088"


def get(path):
    try:
        with urllib.request.urlopen(BASE + path, timeout=5) as r:
            return r.status, r.headers.get("Content-Type"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, None, b""


def test_healthz():
    status, ctype, body = get("/healthz")
    assert status == 200 and ctype == "application/json"
    assert json.loads(body) == {"status": "ok", "routes": 2}


def test_healthz_with_curl():
    out = subprocess.run(["curl", "-s", "-w", "\\n%{http_code}", BASE + "/healthz"],
                         capture_output=True, text=True, timeout=10).stdout
    body, code = out.rsplit("\n", 1)
    assert code == "200" and json.loads(body)["status"] == "ok"


def test_other_routes_unchanged():
    assert json.loads(get("/version")[2]) == {"version": "1.4.2"}
    assert get("/nope")[0] == 404
