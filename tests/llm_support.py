"""Shared by the LLM-backend tests: a two-step parent plan and the proposal items an LLM would send back."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from evokit.plan import Plan, Step

PARENT = Plan((Step("access-log", "topk-count", (("data", 1),)), Step("text-list", "count-records", (), 1)))
SEED = 3


def item(pair: str, reads: bool = False, **other) -> dict:
    """One step of a proposal reply, as the LLM proposer's JSON schema asks for it."""
    return {"pair": pair, "other_scenario": other.get("s", "none"), "other_skill": other.get("k", "none"),
            "reads_previous": reads}


KEPT = [item("access-log/topk-count"), item("text-list/count-records", True)]  # the parent, unchanged


class LocalEndpoint:
    """A real HTTP server on 127.0.0.1 (a free port) for the length of a ``with`` block; a subclass
    gives the request handler (:meth:`handler`), ``api_base`` is its OpenAI-style base URL."""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def __enter__(self):
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


class ScriptedEndpoint(LocalEndpoint):
    """A real OpenAI-compatible HTTP endpoint on 127.0.0.1 that answers with a scripted sequence.

    For tests about the harness around a model (the CLI, the evolution loop, rollouts), not about a
    model: ``POST /v1/chat/completions`` returns the next reply of ``replies`` (a string, or a dict /
    list sent as JSON text; a callable gets the request body and returns one of those), with usage
    counts, over a real socket through the ``openai`` client. ``requests`` keeps every request body;
    a request after the script is spent gets HTTP 500 (the test then fails loudly).
    ``with ScriptedEndpoint(replies) as ep: ep.api_base``.
    """

    def __init__(self, replies: list):
        self.replies, self.requests = list(replies), []
        self._lock = threading.Lock()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        import json

        ep = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with ep._lock:
                    ep.requests.append(body)
                    reply = ep.replies.pop(0) if ep.replies else None
                if reply is None:
                    self._send(500, {"error": {"message": "the scripted endpoint has no reply left"}})
                    return
                if callable(reply):
                    reply = reply(body)
                text = reply if isinstance(reply, str) else json.dumps(reply)
                prompt = sum(len(str(m.get("content", ""))) for m in body.get("messages", [])) // 4
                self._send(200, {
                    "id": f"scripted-{len(ep.requests)}", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "scripted"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": len(text) // 4,
                              "total_tokens": prompt + len(text) // 4}})

        return Handler
