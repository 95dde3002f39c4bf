"""LLMClient: per-call seeds reach the request, retries get their own derived seeds, and an
unseeded call sends none (without a server; the live check that llama.cpp honours a seed is in
test_extract.py); the concurrency cap against a real local HTTP server; and, on the bundled
llama.cpp server (:mod:`evokit.local_llm`), that a request abandoned at its timeout stops
generating, so the next request is served at once."""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from evokit.llm import LLMClient, LLMError, LLMReplyError
from evokit.seeding import call_seed


class FakeCompletions:
    """Records each request's keyword arguments and answers with the next scripted text."""

    def __init__(self, texts: list[str]):
        self.texts, self.requests = texts, []

    def create(self, **kw):
        self.requests.append(kw)
        msg = SimpleNamespace(content=self.texts.pop(0), tool_calls=None)
        return SimpleNamespace(choices=[SimpleNamespace(message=msg, finish_reason="stop")],
                               usage=SimpleNamespace(prompt_tokens=3, completion_tokens=2))


def fake_client(texts: list[str], backend: str = "openai") -> tuple[LLMClient, FakeCompletions]:
    client = LLMClient(model="m", api_base="http://127.0.0.1:9/v1", backend=backend)
    fake = FakeCompletions(texts)
    client._client = SimpleNamespace(chat=SimpleNamespace(completions=fake))
    return client, fake


def test_call_seed_is_stable_and_31_bit():
    """Same parts, same seed, across processes and versions (a resumed run relies on it)."""
    assert call_seed(0, "L000-seed-0000", 1, "length") == 941574478
    assert call_seed(0, "L000", 1, "skill") != call_seed(1, "L000", 1, "skill")
    assert all(0 <= call_seed(i) < 2**31 for i in range(100))


def test_seed_is_sent_and_reported():
    """The seed goes into the request as OpenAI's ``seed``; without one no seed is sent."""
    client, fake = fake_client(["a", "b"])
    assert client.chat_message([{"role": "user", "content": "hi"}], seed=42).seed == 42
    assert fake.requests[0]["seed"] == 42
    assert client.chat_message([{"role": "user", "content": "hi"}]).seed is None
    assert "seed" not in fake.requests[1]


def test_retries_get_derived_seeds():
    """chat_json sends ``seed`` first, then call_seed(seed, "retry", k); the error lists them."""
    client, fake = fake_client(["nope", "still not json"])
    with pytest.raises(LLMReplyError) as err:
        client.chat_json([{"role": "user", "content": "JSON please"}], dict, retries=1, seed=7)
    assert [r["seed"] for r in fake.requests] == [7, call_seed(7, "retry", 1)]
    assert err.value.seeds == [7, call_seed(7, "retry", 1)]
    client, fake = fake_client([json.dumps({"ok": 1})])
    assert client.chat_json([{"role": "user", "content": "JSON"}], dict, seed=None) == {"ok": 1}
    assert "seed" not in fake.requests[0]


@pytest.mark.parametrize(("supported", "sent"), [(["temperature", "seed"], True), (["temperature"], False),
                                                 (None, False)])
def test_litellm_sends_a_seed_only_where_the_provider_takes_one(monkeypatch, supported, sent):
    """Through litellm a provider that does not list ``seed`` would reject the call: none is sent."""
    fake = SimpleNamespace(get_supported_openai_params=lambda model: supported)
    monkeypatch.setitem(sys.modules, "litellm", fake)
    assert LLMClient(model="provider/model", backend="litellm")._sends_seed() is sent


def test_concurrency_caps_requests_in_flight_and_queueing_does_not_eat_the_timeout():
    """concurrency=1: six threads' requests reach a real HTTP server one at a time; each takes 0.4 s
    against a 1 s timeout, so all succeed although the last waits ~2 s for its turn (a wait in the
    client's queue is not counted against the timeout, unlike a wait in the server's)."""
    state = {"now": 0, "most": 0}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with lock:
                state["now"] += 1
                state["most"] = max(state["most"], state["now"])
            time.sleep(0.4)
            with lock:
                state["now"] -= 1
            body = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                               "choices": [{"index": 0, "finish_reason": "stop",
                                            "message": {"role": "assistant", "content": "ok"}}],
                               "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = LLMClient(model="m", api_base=f"http://127.0.0.1:{server.server_address[1]}/v1", timeout=1,
                           max_retries=0, concurrency=1)
        client.chat([{"role": "user", "content": "warm up"}])  # the client's first use imports openai
        replies = []
        threads = [threading.Thread(target=lambda: replies.append(client.chat([{"role": "user", "content": "hi"}])))
                   for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        server.shutdown()
        server.server_close()
    assert replies == ["ok"] * 6 and state["most"] == 1
    assert client.usage.calls == 7 and client.usage.failed_calls == 0


def test_client_settings_are_checked():
    """A timeout, retry count or concurrency that cannot work is refused with the field named."""
    for bad, says in [({"timeout": 0}, "timeout"), ({"max_retries": -1}, "max_retries"),
                      ({"concurrency": 0}, "concurrency")]:
        with pytest.raises(ValueError, match=says):
            LLMClient(model="m", api_base="http://127.0.0.1:9/v1", **bad)


# SmolLM2's end-of-text and end-of-turn tokens, banned so that a generation runs to max_tokens.
NO_END = {"logit_bias": {"0": -100, "2": -100}}


def test_an_abandoned_request_stops_generating_on_the_bundled_server(tmp_path):
    """On `evokit serve-llm`'s llama.cpp server, a 2000-token request whose client times out after 2 s
    stops at once: a short request right after it is served about as fast as on an idle server,
    not after the rest of that generation (measured here first, from the server's own speed)."""
    from evokit.local_llm import LocalServer

    ask = [{"role": "user", "content": "Write a very long story about a dragon."}]
    with LocalServer(log=tmp_path / "server.log") as srv:
        client = LLMClient(model=srv.model_name, api_base=srv.api_base, timeout=600, temperature=0)
        client.chat([{"role": "user", "content": "Say hi."}], max_tokens=8)  # warm-up
        t = time.monotonic()
        client.chat([{"role": "user", "content": "Say hi."}], max_tokens=8)
        idle = time.monotonic() - t
        t = time.monotonic()
        full = client.chat_message(ask, max_tokens=64, **NO_END)  # a request waited for runs to its end
        per_token = (time.monotonic() - t) / 64
        assert full.finish_reason == "length" and full.completion_tokens == 64
        impatient = LLMClient(model=srv.model_name, api_base=srv.api_base, timeout=2, max_retries=0, temperature=0)
        with pytest.raises(LLMError, match="timeout of 2 s"):
            impatient.chat(ask, max_tokens=2000, **NO_END)
        t = time.monotonic()
        client.chat([{"role": "user", "content": "Say hi."}], max_tokens=8)
        after = time.monotonic() - t
    left = 2000 * per_token - 2  # what the abandoned generation would still have taken
    print(f"short request: {idle:.2f} s idle, {after:.2f} s after an abandoned one ({left:.0f} s of it left)")
    assert left > 3 * (idle + 2), "the server is too fast for this test to tell anything"
    assert after < idle + 2, f"{after:.1f} s after the abandoned request against {idle:.1f} s idle"
