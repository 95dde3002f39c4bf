"""evokit.trl_trainer.models: chat templates for TRL's tool loop, offline (HF_HUB_OFFLINE=1, no GPU).

What is checked: SmolLM2's own chat template drops tool calls, so keeping it is a SetupError at
set-up; ``auto`` switches a ChatML vocabulary to TRL's bundled ChatML tool template.
(Model loading is exercised by the training runs in ``test_trl_trainer.py``.)
"""

from __future__ import annotations

import os

import pytest

os.environ.update(HARBOR_TELEMETRY="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TRL_EXPERIMENTAL_SILENCE="1")

import trl  # noqa: E402,F401  (required: a missing TRL must fail, not skip)

from evokit import trl_trainer as T  # noqa: E402


def test_template_without_tools_is_a_setup_error():
    """SmolLM2's own chat template drops tool calls: keeping it is refused before training starts."""
    tok = T.smollm2_tokenizer()
    with pytest.raises(T.SetupError, match="cannot render a tool call"):
        T.prepare_tokenizer(tok, "keep")
    assert T.prepare_tokenizer(T.smollm2_tokenizer(), "auto").chat_template == T.chatml_tools_template()
