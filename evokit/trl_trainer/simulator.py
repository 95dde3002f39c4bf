"""GenEnv's *LLM* simulator update: reward-weighted SFT on D_env with a KL anchor to the initial model.

TRL 1.16's ``SFTTrainer`` has no per-example weight (checked in ``trl/trainer/sft_trainer.py``), so
:func:`weighted_sft` is the documented equivalent — the same token-level NLL, weighted per example,
plus KL(π_θ ‖ π_init) per token. :func:`update_llm_simulator` applies it to the D_env that
GenEnv's task source (:class:`evokit.genenv.GenEnvSource`, in either loop) collected. The procedural
simulator's update (RWR) is :func:`evokit.genenv.rwr_update`.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from evokit.trl_trainer.config import SetupError
from evokit.trl_trainer.models import load_policy


def _weighted_batch(tokenizer, examples: Sequence[dict], device) -> tuple[torch.Tensor, ...]:
    """Left-padded prompt+completion ids (completions end-aligned), completion labels, weights."""
    seqs, n_comp = [], []
    for ex in examples:
        p = tokenizer(ex["prompt"], add_special_tokens=False)["input_ids"]
        c = tokenizer(ex["completion"], add_special_tokens=False)["input_ids"]
        seqs.append(p + c)
        n_comp.append(len(c))
    width, keep = max(map(len, seqs)), max(n_comp) + 1
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    x = torch.tensor([[pad] * (width - len(s)) + s for s in seqs], device=device)
    attn = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=device)
    # labels of the last ``keep - 1`` positions: completion tokens, -100 elsewhere
    y = torch.tensor([[-100] * (keep - 1 - n) + s[len(s) - n:] for s, n in zip(seqs, n_comp, strict=True)],
                     device=device)
    w = torch.tensor([float(ex.get("weight", 1.0)) for ex in examples], device=device)
    return x, attn, y, w, keep


def _completion_logp(model, x, attn, keep: int) -> torch.Tensor:
    """Log-softmax at the positions that predict the last ``keep - 1`` tokens (only those logits are made)."""
    pos = (attn.cumsum(-1) - 1).clamp(min=0)  # as generate() numbers left-padded positions
    logits = model(input_ids=x, attention_mask=attn, position_ids=pos, logits_to_keep=keep).logits
    return torch.log_softmax(logits[:, :-1].float(), dim=-1)


def weighted_sft(model, tokenizer, examples: Sequence[dict], *, steps: int = 100, batch_size: int = 8,
                 lr: float = 1e-5, kl_coef: float = 0.0, ref_model=None, seed: int = 0) -> list[dict]:
    """Reward-weighted SFT: minimise Σ_i w_i·NLL_i / Σ_i w_i + kl_coef·KL(π_θ ‖ π_ref) per completion token.

    ``examples``: {"prompt", "completion", "weight"} (the rows of :func:`evokit.genenv.export_sft_dataset`;
    the prompt is not trained on). NLL_i is the mean over example i's completion tokens; the KL is
    exact over the vocabulary against ``ref_model`` (the initial simulator; GenEnv's anchor). With
    all weights 1 and kl_coef 0 this is plain SFT. Logits are made only for completion positions.
    Returns one metrics dict per step.
    """
    if not examples:
        raise SetupError("weighted_sft: no examples")
    if kl_coef > 0 and ref_model is None:
        raise SetupError("weighted_sft: kl_coef > 0 needs ref_model (the initial model)")
    device = next(model.parameters()).device
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    rng = np.random.default_rng(seed)
    model.train()
    log = []
    for step in range(steps):
        idx = rng.choice(len(examples), size=min(batch_size, len(examples)), replace=False)
        x, attn, y, w, keep = _weighted_batch(tokenizer, [examples[i] for i in idx], device)
        logp = _completion_logp(model, x, attn, keep)
        mask = (y != -100).float()
        nll = -(logp.gather(-1, y.clamp(min=0).unsqueeze(-1)).squeeze(-1) * mask)
        per_example = nll.sum(1) / mask.sum(1).clamp(min=1)
        weighted = (w * per_example).sum() / w.sum()
        kl = torch.zeros((), device=device)
        if kl_coef > 0:
            with torch.no_grad():
                ref_logp = _completion_logp(ref_model, x, attn, keep)
            kl = ((logp.exp() * (logp - ref_logp)).sum(-1) * mask).sum() / mask.sum().clamp(min=1)
        loss = weighted + kl_coef * kl
        opt.zero_grad()
        loss.backward()
        opt.step()
        log.append({"step": step, "loss": loss.item(), "nll": weighted.item(), "kl": kl.item()})
    return log


def update_llm_simulator(d_env: str | Path, model: str | Path, out: str | Path, *, steps: int = 100,
                         lr: float = 1e-5, kl_coef: float = 0.1, batch_size: int = 8, seed: int = 0) -> Path:
    """GenEnv's simulator update for an LLM simulator: reward-weighted SFT on D_env, KL-anchored.

    ``d_env``: a pools folder (:class:`evokit.genenv.Pools`) or the JSONL that
    :func:`evokit.genenv.export_sft_dataset` wrote; ``model``: the simulator (spec for :func:`load_policy`).
    The prompt is rendered as a user message with the model's chat template, the completion (the
    plan as JSON) as the assistant's answer. The updated model is written to ``out`` (atomically).
    """
    from evokit import genenv

    d_env = Path(d_env)
    if d_env.is_dir():
        path = d_env / "sft.jsonl"
        genenv.export_sft_dataset(genenv.Pools(d_env), path)
        d_env = path
    rows = [json.loads(line) for line in d_env.read_text().splitlines() if line.strip()]
    policy, tok = load_policy(model)
    ref = copy.deepcopy(policy).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    examples = []
    for r in rows:
        prompt = (tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False,
                                          add_generation_prompt=True) if tok.chat_template else r["prompt"])
        examples.append({"prompt": prompt, "completion": r["completion"] + (tok.eos_token or ""),
                         "weight": r["weight"]})
    log = weighted_sft(policy, tok, examples, steps=steps, lr=lr, kl_coef=kl_coef, ref_model=ref,
                       batch_size=batch_size, seed=seed)
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    policy.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "sft_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    if out.exists():
        shutil.rmtree(out)
    os.rename(tmp, out)
    return out
