"""evokit.trl_trainer.simulator: GenEnv's LLM-simulator update (reward-weighted SFT with a KL anchor), on CPU.

What is checked: with two answers to one prompt weighted 4 : 1, ``weighted_sft`` makes the heavier
one win at about those odds; a strong KL anchor to the initial model keeps the model near its start.
"""

from __future__ import annotations

import os

import pytest

os.environ.update(HARBOR_TELEMETRY="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TRL_EXPERIMENTAL_SILENCE="1")

import torch  # noqa: E402  (required: the train extra; a missing TRL must fail, not skip)
import trl  # noqa: E402,F401  (required: a missing TRL must fail, not skip)

from evokit import trl_trainer as T  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return T.prepare_tokenizer(T.smollm2_tokenizer())


def test_weighted_sft_follows_the_weights_and_the_anchor(tokenizer):
    """Two answers to one prompt: the heavier one wins; a strong KL anchor keeps the model near its start."""
    prompt = "<|im_start|>user\nname a colour<|im_end|>\n<|im_start|>assistant\n"
    examples = [{"prompt": prompt, "completion": "red<|im_end|>", "weight": 4.0},
                {"prompt": prompt, "completion": "blue<|im_end|>", "weight": 1.0}]
    red, blue = (tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in ("red", "blue"))

    def probs(model):
        ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            p = torch.softmax(model(input_ids=ids).logits[0, -1], -1)
        return float(p[red]), float(p[blue])

    free = T.tiny_llama(tokenizer, seed=1)
    T.weighted_sft(free, tokenizer, examples, steps=40, batch_size=2, lr=3e-3)
    p_red, p_blue = probs(free)
    assert p_red > p_blue and p_red + p_blue > 0.9 and 0.6 < p_red / (p_red + p_blue) < 0.95  # ≈ 4/5
    anchored, ref = T.tiny_llama(tokenizer, seed=1), T.tiny_llama(tokenizer, seed=1)
    log = T.weighted_sft(anchored, tokenizer, examples, steps=40, batch_size=2, lr=3e-3, kl_coef=50.0, ref_model=ref)
    assert probs(anchored)[0] < p_red and log[-1]["kl"] < 1.0
