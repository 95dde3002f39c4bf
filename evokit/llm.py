"""One client for LLM endpoints: any OpenAI-compatible server, or hosted APIs through litellm.

Every LLM role in evokit (plan extraction, the LLM reference distribution, the evolution
harness's proposer/reviewer/modifier, the terminal agent) goes through :class:`LLMClient`,
so token and call counts are recorded in one place (:attr:`LLMClient.usage`).

* ``backend="openai"`` talks to an OpenAI-compatible server at ``api_base`` (a vLLM server on
  GPU machines; llama.cpp's server on CPU, as the tests do);
* ``backend="litellm"`` routes ``model`` (e.g. ``anthropic/claude-…``) through litellm.

**Timeouts, retries, concurrency** (:class:`LLMClient` fields; ``--llm-timeout``,
``--llm-retries``, ``--llm-concurrency`` on the CLI): ``timeout`` bounds each attempt; a request
that times out is abandoned by closing its HTTP connection, which is how an OpenAI-compatible
server learns to stop (vLLM aborts the request; ``evokit serve-llm``'s llama.cpp server stops
generating, see :mod:`evokit.local_llm`). ``max_retries`` more attempts follow a timeout, a
connection error or an HTTP 408/409/429/5xx (the ``openai`` client's retry rule, with its
back-off; litellm's ``num_retries``), so a call waits at most about ``(max_retries + 1) ×
timeout``. ``concurrency`` caps the requests in flight from one client across threads (e.g.
lineages evolved at once): a server with one slot queues the others, and a queued request would
spend its timeout waiting; waiting for a slot here does not count against it.

**Watching and budgets** (``on_call``, ``max_calls``; ``--max-calls`` and the ``llm call:`` lines of
``evokit evolve --backend llm`` and ``evokit extract``): every request, answered or failed, is reported
to ``on_call`` as a :class:`CallRecord` (what it was for, the attempt within :meth:`LLMClient.chat_json`,
tokens, seconds), so a researcher can watch a long run without prints scattered through the roles;
:func:`print_call` writes one line to stderr. ``max_calls`` caps the requests a client sends (answered
or not): the next one raises :class:`LLMBudgetSpent` before anything is sent. The cap is per client
object, so a client pickled into a process or Ray worker counts that worker's requests only.

:meth:`LLMClient.chat_json` is the contract for structured replies: parse JSON (tolerating a
fenced block), validate it with the caller's function, and on failure send the validation
error back and retry, raising :class:`LLMReplyError` with every error once the retry budget
is spent. Prompts live as files in ``evokit/prompts/`` (:func:`prompt`).

**Seeds.** Calls take an optional ``seed`` (see :func:`evokit.seeding.call_seed`), sent as the OpenAI ``seed``
parameter, so that the same question asked again (a resumed run) is sampled the same way.
llama.cpp's server and vLLM honour it (same seed, prompt and server → same reply); hosted APIs
may not: OpenAI treats it as best effort, and through litellm it is sent only to providers that
list ``seed`` among their parameters (others drop it). A seeded run is therefore reproducible only
as far as the endpoint is. :class:`ChatReply` and :class:`LLMReplyError` say which seeds were sent.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, TypeVar

import numpy as np

from evokit.errors import Unavailable, UserError
from evokit.seeding import call_seed

T = TypeVar("T")
LABELS = [chr(c) for c in range(ord("A"), ord("Z") + 1)] + [chr(c) for c in range(ord("a"), ord("z") + 1)]


class LLMError(Unavailable, RuntimeError):
    """The endpoint failed (down, timed out, HTTP error, a reply that is not a completion); the
    message, one line, names the endpoint and the model."""


class LLMBudgetSpent(LLMError):
    """The client's ``max_calls`` requests were all sent; nothing more is asked. Not a rejection of
    anything the model said (a RuntimeError, like every :class:`LLMError`): the run stops, keeping
    what it finished, and a rerun with a larger budget continues it."""


class LLMReplyError(UserError, ValueError):
    """The model's replies never validated; ``errors`` holds the reason for each attempt, ``seeds``
    the seed each attempt was sent with (None where unseeded)."""

    def __init__(self, what: str, errors: list[str], replies: list[str], seeds: list[int | None] | None = None):
        self.what, self.errors, self.replies, self.seeds = what, errors, replies, seeds or [None] * len(errors)
        shown = "; ".join(f"attempt {i + 1}: {e}" for i, e in enumerate(errors))
        super().__init__(f"{what}: no valid reply after {len(errors)} attempt(s): {shown}")

    def __reduce__(self):  # travels back from a process or Ray worker whole
        return type(self), (self.what, self.errors, self.replies, self.seeds)


#: The longest piece of an endpoint's own error text kept in an :class:`LLMError` (an HTTP error
#: can carry a whole HTML page or request body).
ERROR_DETAIL_CHARS = 300


def prompt(name: str, **values: str) -> str:
    """Load ``evokit/prompts/<name>.md`` and fill ``{placeholders}``."""
    text = resources.files("evokit.prompts").joinpath(f"{name}.md").read_text()
    return text.format(**values) if values else text


@dataclass
class Usage:
    calls: int = 0
    failed_calls: int = 0
    invalid_replies: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class CallRecord:
    """One request as :attr:`LLMClient.on_call` sees it, answered (``error`` None) or failed."""

    what: str  # what the call was for: "plan review", "length edit", "plan extraction for T", "chat"
    attempt: int  # 1-based attempt within chat_json's retries (1 outside chat_json)
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    error: str | None = None  # the failure's one-line message
    number: int = 0  # this client's n-th reported request (per process: each worker counts its own)
    planned: int | None = None  # an upper bound on the run's requests (max_calls or planned_calls), if known
    mean_seconds: float = 0.0  # mean seconds per request so far, this one included


def call_line(rec: CallRecord) -> str:
    """The line :func:`print_call` writes, e.g. ``llm call: plan review, attempt 1: 812 + 143 tokens, 2.3 s``."""
    count = f" {rec.number}" if rec.number else ""
    if rec.number and rec.planned:
        count += f" of ≤ {rec.planned}"
    head = f"llm call{count}: {rec.what}, attempt {rec.attempt}: "
    if rec.error is not None:
        return head + f"failed after {rec.seconds:.1f} s ({_clip(rec.error)[:160]})"
    line = head + f"{rec.prompt_tokens} + {rec.completion_tokens} tokens, {rec.seconds:.1f} s"
    if rec.number and rec.planned and rec.planned > rec.number:
        left = (rec.planned - rec.number) * rec.mean_seconds
        line += f"; ≤ {_duration(left)} left at {rec.mean_seconds:.1f} s per call"
    return line


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min" if seconds >= 90 \
        else f"{seconds:.0f} s"


def print_call(rec: CallRecord) -> None:
    """An ``on_call`` hook: one line per request on stderr (a module function, so a client stays picklable),
    written through tqdm so that a progress bar on stderr is cleared first and redrawn below the line."""
    from tqdm.auto import tqdm

    tqdm.write(call_line(rec), file=sys.stderr)


@dataclass
class ToolCall:
    """One tool call of an assistant message."""

    id: str
    name: str
    arguments: Any  # as the server sent it: normally a JSON string, which may be malformed


@dataclass
class ChatReply:
    """One assistant message (see :meth:`LLMClient.chat_message`)."""

    content: str
    tool_calls: list[ToolCall]
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    seed: int | None = None  # the seed sent with the request (None: none sent)


@dataclass
class LLMClient:
    """A chat/completions client with usage accounting."""

    model: str
    api_base: str | None = None
    api_key: str | None = None
    backend: str = "openai"  # "openai" (any OpenAI-compatible server) or "litellm"
    timeout: float = 120.0  # seconds per attempt (module docstring)
    temperature: float = 0.2
    max_tokens: int = 1024
    max_retries: int = 1  # attempts after the first on a timeout, connection or 408/409/429/5xx error
    concurrency: int | None = None  # requests in flight at once from this client; None: no cap
    max_calls: int | None = None  # requests this client may send (answered or failed); None: no cap
    on_call: Callable[[CallRecord], None] | None = None  # told of every request (module docstring)
    #: An upper bound on the requests the run will send (e.g. :func:`evokit.evolve.llm_roles.max_calls`),
    #: which turns ``on_call``'s records into an ETA: an upper bound too, at the mean pace so far.
    planned_calls: int | None = None
    usage: Usage = field(default_factory=Usage)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self):
        if self.backend not in {"openai", "litellm"}:
            raise ValueError(f"backend must be 'openai' or 'litellm', not {self.backend!r}")
        if not self.timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, not {self.timeout!r}")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be 0 or more, not {self.max_retries}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1 (or None: no cap), not {self.concurrency}")
        if self.max_calls is not None and self.max_calls < 1:
            raise ValueError(f"max_calls must be at least 1 (or None: no cap), not {self.max_calls}")
        self._sent = self._reported = 0
        self._seconds = 0.0
        self._client = None
        self._litellm_seed: bool | None = None
        self._slots = threading.BoundedSemaphore(self.concurrency) if self.concurrency else contextlib.nullcontext()

    def __getstate__(self) -> dict:
        """Pickled (to a process or Ray worker) without its connection pool and locks, rebuilt there;
        ``concurrency`` then caps each worker process's requests."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("_client", "_lock", "_slots")}
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._client, self._lock = None, threading.Lock()
        self._slots = threading.BoundedSemaphore(self.concurrency) if self.concurrency else contextlib.nullcontext()

    def _sends_seed(self) -> bool:
        """Whether a ``seed`` goes to the endpoint: always for OpenAI-compatible servers; through litellm
        only for providers that list it (others would reject the call)."""
        if self.backend == "openai":
            return True
        if self._litellm_seed is None:
            import litellm

            try:
                supported = litellm.get_supported_openai_params(model=self.model) or []
            except Exception:  # an unknown provider: send nothing litellm might reject
                supported = []
            self._litellm_seed = "seed" in supported
        return self._litellm_seed

    @property
    def client(self):
        if self._client is None and self.backend == "openai":
            from openai import OpenAI

            with self._lock:  # one connection pool, whichever thread asks first
                if self._client is not None:
                    return self._client
                self._client = OpenAI(base_url=self.api_base, timeout=self.timeout, max_retries=self.max_retries,
                                      api_key=self.api_key or os.environ.get("OPENAI_API_KEY") or "not-needed")
        return self._client

    def _reserve(self) -> None:
        """Take one request from the ``max_calls`` budget, or raise :class:`LLMBudgetSpent`."""
        with self._lock:
            if self.max_calls is not None and self._sent >= self.max_calls:
                raise LLMBudgetSpent(f"LLM call budget spent: {self._sent} of max_calls={self.max_calls} "
                                     f"request(s) sent to {self.api_base or self.backend} ({self.model})")
            self._sent += 1

    def _report(self, what: str, attempt: int, started: float, tokens: tuple[int, int] = (0, 0),
                error: Exception | None = None) -> None:
        if self.on_call is not None:
            seconds = time.monotonic() - started
            with self._lock:
                self._reported += 1
                self._seconds += seconds
                number, mean = self._reported, self._seconds / self._reported
            bounds = [b for b in (self.max_calls, self.planned_calls) if b is not None]
            self.on_call(CallRecord(what, attempt, *tokens, seconds, None if error is None else str(error),
                                    number, min(bounds) if bounds else None, mean))

    def _count(self, usage) -> None:
        with self._lock:
            self.usage.calls += 1
            if usage is not None:
                self.usage.prompt_tokens += getattr(usage, "prompt_tokens", 0) or 0
                self.usage.completion_tokens += getattr(usage, "completion_tokens", 0) or 0

    def _fail(self, e: Exception, reply: Any = None) -> LLMError:
        """The one-line :class:`LLMError` for a failed call (``reply``: what came back, if anything did)."""
        with self._lock:
            self.usage.failed_calls += 1
        where = f"LLM endpoint {self.api_base or self.backend} ({self.model})"
        if _timed_out(e):
            return LLMError(f"{where} did not answer within the timeout of {self.timeout:g} s "
                            f"({self.max_retries + 1} attempt(s); a slow model or a busy server needs a "
                            "longer timeout, e.g. --llm-timeout)")
        if isinstance(e, json.JSONDecodeError):
            return LLMError(f"{where} answered with a body that is not JSON ({e.msg} at char {e.pos})")
        if reply is not None:
            return LLMError(f"{where} answered with something that is not an OpenAI completion: {_clip(repr(reply))}")
        return LLMError(f"{where} failed: {type(e).__name__}: {_clip(str(e))}")

    def chat(self, messages: list[dict], *, json_schema: dict | None = None, seed: int | None = None, **kw) -> str:
        """One chat completion's text; ``json_schema`` asks the server to constrain the reply (where supported)."""
        return self.chat_message(messages, json_schema=json_schema, seed=seed, **kw).content

    def chat_message(self, messages: list[dict], *, tools: list[dict] | None = None, tool_choice: Any = None,
                     json_schema: dict | None = None, seed: int | None = None, what: str = "chat",
                     attempt: int = 1, **kw) -> ChatReply:
        """One chat completion with the whole assistant message: text, tool calls, finish reason, usage.

        For agents: ``tools`` is an OpenAI tools list; ``tool_choice`` is passed through when given
        ("auto", "required", or ``{"type": "function", "function": {"name": ...}}`` to force one tool).
        ``seed`` is sent as the request's ``seed`` where the endpoint takes one (module docstring).
        Usage is counted as :meth:`chat` counts it; failures raise :class:`LLMError` naming the endpoint.
        ``what`` and ``attempt`` only label the request for ``on_call``.
        """
        args = {"model": self.model, "messages": messages, "temperature": kw.pop("temperature", self.temperature),
                "max_tokens": kw.pop("max_tokens", self.max_tokens), **kw}
        sent = seed if seed is not None and self._sends_seed() else None
        if sent is not None:
            args["seed"] = sent
        if tools is not None:
            args["tools"] = tools
        if tool_choice is not None:
            args["tool_choice"] = tool_choice
        if json_schema is not None:
            args["response_format"] = {"type": "json_object", "schema": json_schema}
        self._reserve()
        started = time.monotonic()
        try:
            with self._slots:
                if self.backend == "litellm":
                    import litellm

                    resp = litellm.completion(api_base=self.api_base, api_key=self.api_key, timeout=self.timeout,
                                              num_retries=self.max_retries, **args)
                else:
                    resp = self.client.chat.completions.create(**args)
        except Exception as e:
            err = self._fail(e)
            self._report(what, attempt, started, error=err)
            raise err from e
        try:
            choice, usage = resp.choices[0], resp.usage
            calls = [ToolCall(getattr(c, "id", None) or f"call_{i}", c.function.name or "", c.function.arguments)
                     for i, c in enumerate(choice.message.tool_calls or [])]
        except Exception as e:  # an answer, but no chat completion (no choices, no message)
            err = self._fail(e, resp)
            self._report(what, attempt, started, error=err)
            raise err from e
        self._count(usage)
        self._report(what, attempt, started, (getattr(usage, "prompt_tokens", 0) or 0,
                                              getattr(usage, "completion_tokens", 0) or 0))
        return ChatReply(content=choice.message.content or "", tool_calls=calls, finish_reason=choice.finish_reason,
                         prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
                         completion_tokens=getattr(usage, "completion_tokens", 0) or 0, seed=sent)

    def chat_json(self, messages: list[dict], validate: Callable[[Any], T], *, what: str = "reply",
                  retries: int = 2, json_schema: dict | None = None, seed: int | None = None) -> T:
        """Ask, parse JSON, validate; feed each error back; raise :class:`LLMReplyError` when out of tries.

        With ``seed``, attempt 0 is sent with ``seed`` and retry k with ``call_seed(seed, "retry", k)``.
        """
        history = list(messages)
        errors: list[str] = []
        replies: list[str] = []
        seeds: list[int | None] = []
        for attempt in range(retries + 1):
            # Retries sample a little hotter: at temperature 0 a model tends to repeat its mistake.
            temp = self.temperature if attempt == 0 else max(self.temperature, 0.7)
            s = None if seed is None else seed if attempt == 0 else call_seed(seed, "retry", attempt)
            seeds.append(s)
            text = self.chat(history, json_schema=json_schema, temperature=temp, seed=s, what=what,
                             attempt=attempt + 1)
            replies.append(text)
            try:
                return validate(parse_json(text))
            except (ValueError, KeyError, TypeError) as e:
                with self._lock:
                    self.usage.invalid_replies += 1
                errors.append(str(e))
                history += [{"role": "assistant", "content": text},
                            {"role": "user", "content": f"That reply is invalid: {e}. Reply again with JSON only, "
                                                        "fixing exactly this problem."}]
        raise LLMReplyError(what, errors, replies, seeds)

    def choice_logprobs(self, question: str, options: list[str]) -> np.ndarray:
        """log p(option | question) for a lettered multiple choice, from the next-token distribution.

        One ``/v1/completions`` call with ``logprobs``; options whose label is not among the
        returned top tokens get a floor one nat below the least likely returned label.
        Returned values are renormalised over the options.
        """
        if len(options) > len(LABELS):
            raise ValueError(f"at most {len(LABELS)} options per question, got {len(options)}")
        listing = "\n".join(f"{LABELS[i]}) {o}" for i, o in enumerate(options))
        text = f"{question}\n{listing}\nAnswer with one letter.\nAnswer:"
        self._reserve()
        started = time.monotonic()
        try:
            with self._slots:
                resp = self.client.completions.create(model=self.model, prompt=text, max_tokens=1, temperature=0,
                                                      logprobs=min(len(options) + 20, 60))
        except Exception as e:
            err = self._fail(e)
            self._report("choice logprobs", 1, started, error=err)
            raise err from e
        try:
            top, usage = (resp.choices[0].logprobs.top_logprobs or [{}])[0] or {}, resp.usage
        except Exception as e:  # an answer, but no completion with logprobs
            err = self._fail(e, resp)
            self._report("choice logprobs", 1, started, error=err)
            raise err from e
        self._count(usage)
        self._report("choice logprobs", 1, started, (getattr(usage, "prompt_tokens", 0) or 0,
                                                     getattr(usage, "completion_tokens", 0) or 0))
        best: dict[str, float] = {}
        for tok, lp in top.items():
            label = tok.strip()
            if label in LABELS[: len(options)]:
                best[label] = max(best.get(label, -np.inf), lp)
        floor = (min(best.values()) if best else 0.0) - 1.0
        scores = np.array([best.get(LABELS[i], floor) for i in range(len(options))])
        return scores - np.logaddexp.reduce(scores)


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ERROR_DETAIL_CHARS else text[:ERROR_DETAIL_CHARS] + "…"


def _timed_out(e: BaseException) -> bool:
    """Whether ``e`` (or what caused it) is a request timeout: the ``openai`` client's
    APITimeoutError, httpx's, or litellm's ``Timeout`` (all named so; no import needed)."""
    seen = 0
    while e is not None and seen < 8:
        if "Timeout" in type(e).__name__ or isinstance(e, TimeoutError):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def parse_json(text: str) -> Any:
    """The JSON value in a reply: the whole text, or the first fenced block; clear error otherwise."""
    text = text.strip()
    candidates = [text] + _FENCE.findall(text)
    for c in candidates:
        try:
            return json.loads(c)
        except json.JSONDecodeError:
            continue
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        try:
            return json.loads(text[start:end + 1])
        except json.JSONDecodeError as e:
            raise ValueError(f"reply is not valid JSON ({e.msg} at char {e.pos})") from None
    raise ValueError(f"reply is not JSON: {text[:120]!r}")
