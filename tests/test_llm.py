"""LLMClient without a server: per-call seeds reach the request, retries get their own derived
seeds, and an unseeded call sends none (the live check that llama.cpp honours a seed is in
test_extract.py)."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest

from evokit.llm import LLMClient, LLMReplyError
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
