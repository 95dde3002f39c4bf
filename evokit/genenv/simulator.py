"""GenEnv's environment simulator for the procedural family, and its reward-weighted regression (RWR) step.

The simulator is an LLM in the paper. Here it is a small parametric generator over catalog plans
(softmax tables, see :class:`Simulator`), conditioned on a context = a catalog domain (as seeds
are balanced over domains; the domain of a plan's first scenario, so a plan names its own
context), so that the environment-side learning can run and be tested without a GPU. Its RWR
step is one gradient step of the weighted log-likelihood on the logits (normalised by each
context's total weight) with a KL penalty to the initial simulator. "Per-step KL capped" is read
as a trust region: KL(new ‖ previous) ≤ ``max_step_kl`` after every step (the step is shrunk
until it holds); ``max_kl`` optionally also caps KL(new ‖ initial) in total (the training loop
leaves it off: see :class:`evokit.genenv.source.GenEnvConfig`). The KL is a per-factor proxy
(:func:`simulator_kl`). With no kept record the step is the KL penalty's alone, towards the
initial simulator (the objective's likelihood term is empty, its penalty is not). Training an
LLM simulator on the same records is a TRL job on the exported D_env (:mod:`evokit.trl_trainer.simulator`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from evokit.catalog.registry import scenario as catalog_scenario
from evokit.difficulty import catalog_reference
from evokit.plan import Plan, PlanError, Step, compose

TABLES = ("length", "first", "scenario", "skill", "chain")


@dataclass(frozen=True, eq=False)
class Simulator:
    """π_env for the procedural family: softmax tables, one set per context (a catalog domain).

    Generative process for context c (each draw from the softmax of the named logits):

    1. length L ∈ {min_len..max_len}                          ``length[c]``      (C, L_max − 1)
    2. step 1: scenario σ1 of c's domain                      ``first[c]``       (C, S)
    3. step t ≥ 2: if step t−1's output is a dataset, chain?  ``chain[c]``       (C, 2) = (fresh, chain)
       chained: σ_t = that output's scenario, ``input = t−1``; fresh: σ_t from ``scenario[c]`` (C, S)
    4. every step: skill κ_t given σ_t                        ``skill[c, σ_t]``  (C, S, K)

    Invalid entries (out-of-domain first scenarios, incompatible skills) are −inf. Plans are
    checked with :func:`evokit.plan.compose` under ``render_seed`` (render them with it) and
    resampled if they do not render. ``learning=False`` is GenEnv's random-simulator baseline.
    """

    contexts: tuple[str, ...]
    scenarios: tuple[str, ...]
    skills: tuple[str, ...]
    min_len: int
    max_len: int
    length: np.ndarray
    first: np.ndarray
    scenario: np.ndarray
    skill: np.ndarray
    chain: np.ndarray
    render_seed: int = 0
    learning: bool = True
    updates: int = 0
    tilt: float = 0.0  # how far the initial tables were tilted away from p_T (init_simulator)

    def tables(self) -> dict[str, np.ndarray]:
        return {t: getattr(self, t) for t in TABLES}

    def probs(self, table: str) -> np.ndarray:
        return np.exp(_log_softmax(getattr(self, table)))


def _log_softmax(z: np.ndarray) -> np.ndarray:
    m = np.max(z, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def plan_context(plan: Plan) -> str:
    """The context a simulator plan was generated for: the domain of its first scenario."""
    return catalog_scenario(plan.steps[0].scenario).domain


ANY_CONTEXT = "any"  # a context whose plans may start in any domain (one shared set of tables)


def init_simulator(max_len: int = 6, min_len: int = 2, render_seed: int = 0, learning: bool = True,
                   contexts: Sequence[str] | None = None, tilt: float = 0.0) -> Simulator:
    """The initial generator: logits = (1 − ``tilt``)·log p_T of :func:`evokit.difficulty.catalog_reference`.

    At ``tilt`` 0: scenarios ∝ prior (the first one restricted to the context's domain, as seeds
    are), skills ∝ p_T(κ | σ) renormalised over the compatible ones. ``tilt`` 1 makes every
    compatible choice equally likely, and ``tilt`` > 1 weights rare scenarios and rare pairs
    *above* common ones (∝ p_T^(1 − tilt)): GenEnv's simulator starts where the base agent
    succeeds on 13.8 % of its tasks, and an agent pretrained on the world's frequencies succeeds
    far more often than that on p_T's own plans, so the starting condition needs rarer plans
    (docs/preregistration.md, claim 7; the tilt is evokit's, the paper's simulator is an LLM).
    Chaining 1/2 (as :mod:`evokit.seeds`) and a uniform length (p_T has no length distribution;
    ``max_len`` 6 is one more than the seeds' 5 so that the simulator can learn to lengthen).
    """
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 ≤ min_len ≤ max_len; got {min_len}, {max_len}")
    if tilt < 0:
        raise ValueError(f"need tilt ≥ 0 (0: p_T, 1: uniform, > 1: rare first); got {tilt}")
    ref = catalog_reference()
    domains = tuple(sorted({catalog_scenario(s).domain for s in ref.scenarios}))
    # Contexts are catalog domains (GenEnv's prompts), or ANY_CONTEXT: one set of tables shared by
    # every plan, so that at CPU scale each update moves the whole generator (``contexts=["any"]``).
    contexts = tuple(contexts) if contexts else domains
    unknown = [c for c in contexts if c not in domains and c != ANY_CONTEXT]
    if unknown:
        raise ValueError(f"unknown simulator contexts {unknown}; use catalog domains {domains} or {ANY_CONTEXT!r}")
    n_c = len(contexts)
    in_domain = np.array([[c == ANY_CONTEXT or catalog_scenario(s).domain == c for s in ref.scenarios] for c in contexts])
    with np.errstate(invalid="ignore"):  # −inf · (1 − tilt) stays −inf for tilt < 1; masked below otherwise
        log_scenario = np.where(np.isfinite(ref.log_scenario), (1 - tilt) * ref.log_scenario, -np.inf)
        log_skill = np.where(np.isfinite(ref.log_skill), (1 - tilt) * ref.log_skill, -np.inf)
    first = np.where(in_domain, log_scenario[None, :], -np.inf)
    return Simulator(contexts, ref.scenarios, ref.skills, min_len, max_len,
                     length=np.zeros((n_c, max_len - min_len + 1)), first=first,
                     scenario=np.tile(log_scenario, (n_c, 1)), skill=np.tile(log_skill, (n_c, 1, 1)),
                     chain=np.zeros((n_c, 2)), render_seed=render_seed, learning=learning, tilt=tilt)


def random_simulator(**kwargs) -> Simulator:
    """GenEnv's baseline: the same generator, never updated (:func:`rwr_update` returns it as is)."""
    return init_simulator(learning=False, **kwargs)


@functools.lru_cache(maxsize=8192)
def _outputs(plan: Plan, seed: int) -> tuple[str | None, ...]:
    """Scenario of each step's output dataset (None: nothing a later step can read); PlanError if invalid."""
    return tuple(None if s.output_dataset is None else s.output_dataset.scenario for s in compose(plan, seed).specs)


def _draw(rng: np.random.Generator, logits: np.ndarray) -> int:
    return int(rng.choice(len(logits), p=np.exp(_log_softmax(logits))))


def _sample_one(sim: Simulator, c: int, rng: np.random.Generator) -> Plan:
    s_index = {s: i for i, s in enumerate(sim.scenarios)}
    length = sim.min_len + _draw(rng, sim.length[c])
    s = _draw(rng, sim.first[c])
    steps = [Step(sim.scenarios[s], sim.skills[_draw(rng, sim.skill[c, s])])]
    while len(steps) < length:
        out = _outputs(Plan(tuple(steps)), sim.render_seed)[-1]
        chained = out is not None and _draw(rng, sim.chain[c]) == 1
        s = s_index[out] if chained else _draw(rng, sim.scenario[c])
        steps.append(Step(sim.scenarios[s], sim.skills[_draw(rng, sim.skill[c, s])],
                          input=len(steps) if chained else None))
    plan = Plan(tuple(steps))
    _outputs(plan, sim.render_seed)  # the last step must render too
    return plan


def sample_plans(sim: Simulator, context: str, n: int, rng: np.random.Generator,
                 max_attempts: int = 50) -> list[Plan]:
    """``n`` valid plans for ``context`` (a domain); a plan that does not render is redrawn."""
    c = _context_index(sim, context)
    plans = []
    for _ in range(n):
        for _attempt in range(max_attempts):
            try:
                plans.append(_sample_one(sim, c, rng))
                break
            except PlanError:
                continue
        else:
            raise RuntimeError(f"sample_plans: no renderable plan for {context!r} in {max_attempts} attempts")
    return plans


def _context_index(sim: Simulator, context: str) -> int:
    if context not in sim.contexts and ANY_CONTEXT in sim.contexts:
        return sim.contexts.index(ANY_CONTEXT)  # a domain served by the shared context
    try:
        return sim.contexts.index(context)
    except ValueError:
        raise KeyError(f"unknown context {context!r}; known: {', '.join(sim.contexts)}") from None


def _decisions(sim: Simulator, plan: Plan, c: int) -> list[tuple[str, tuple[int, ...]]] | None:
    """The table entries the generative process uses to produce ``plan`` (None: it cannot)."""
    s_index = {s: i for i, s in enumerate(sim.scenarios)}
    k_index = {k: j for j, k in enumerate(sim.skills)}
    if not sim.min_len <= len(plan) <= sim.max_len:
        return None
    try:
        outs = _outputs(Plan(plan.steps), sim.render_seed)
        ids = [(s_index[st.scenario], k_index[st.skill]) for st in plan.steps]
    except (PlanError, KeyError):
        return None
    out: list[tuple[str, tuple[int, ...]]] = [("length", (c, len(plan) - sim.min_len))]
    for t, (st, (s, k)) in enumerate(zip(plan.steps, ids, strict=True), 1):
        if t == 1:
            if st.input is not None:
                return None
            out.append(("first", (c, s)))
        elif st.input == t - 1:
            out.append(("chain", (c, 1)))
        elif st.input is None:
            if outs[t - 2] is not None:
                out.append(("chain", (c, 0)))
            out.append(("scenario", (c, s)))
        else:
            return None  # the simulator only chains to the step just before
        out.append(("skill", (c, s, k)))
    return out


def log_prob(sim: Simulator, plan: Plan, context: str | None = None) -> float:
    """log π_env(plan | context) under the generative process (−inf if it cannot produce the plan).

    Not renormalised by the mass of renderable plans (the few redraws of :func:`sample_plans`).
    """
    c = _context_index(sim, context or plan_context(plan))
    dec = _decisions(sim, plan, c)
    if dec is None:
        return -math.inf
    logp = {t: _log_softmax(getattr(sim, t)) for t in TABLES}
    return float(sum(logp[t][i] for t, i in dec))


def _row_kl(p_logits: np.ndarray, q_logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """KL(p ‖ q) of every row (last axis) and its gradient with respect to p's logits."""
    lp, lq = _log_softmax(p_logits), _log_softmax(q_logits)
    p = np.exp(lp)
    with np.errstate(invalid="ignore"):  # −inf − (−inf) where both are masked
        diff = np.where(p > 0, lp - lq, 0.0)
    kl = (p * diff).sum(axis=-1)
    return kl, p * (diff - kl[..., None])


def _kl_weights(ref: Simulator) -> dict[str, np.ndarray]:
    """Row weights of the per-factor KL: contexts uniform, skill rows by the reference p(σ)."""
    n_c = len(ref.contexts)
    rows = {t: np.full(getattr(ref, t).shape[:-1], 1.0 / n_c) for t in TABLES}
    rows["skill"] = ref.probs("scenario") / n_c
    return rows


def simulator_kl(sim: Simulator, ref: Simulator) -> float:
    """Per-factor KL(sim ‖ ref) (GenEnv's KL to the initial simulator, as a tractable proxy).

    mean over contexts of KL(length) + KL(first σ) + KL(fresh σ) + KL(chain) + Σ_σ p_ref(σ)·KL(κ | σ).
    Zero iff the tables define the same distributions.
    """
    w = _kl_weights(ref)
    return float(sum((w[t] * _row_kl(getattr(sim, t), getattr(ref, t))[0]).sum() for t in TABLES))


def _with(sim: Simulator, tables: dict[str, np.ndarray], **kw) -> Simulator:
    return replace(sim, **tables, **kw)


def rwr_update(sim: Simulator, records: Sequence[tuple[Plan, float]], *, lr: float, kl_coef: float,
               init_sim: Simulator | None = None, max_kl: float = math.inf, max_step_kl: float | None = None
               ) -> Simulator:
    """One RWR step: ascend Σ_c (1/W_c) Σ_{records of c} w·log π_env(plan | c) − kl_coef·KL(π_env ‖ π_init).

    W_c is the total weight of context c's records, so each context's conditional takes a
    weighted-maximum-likelihood step of the same size however the records split over contexts.
    Gradient of a softmax factor with logits z and chosen entry i: onehot(i) − softmax(z), so
    the log-likelihood part is (weighted counts − weighted totals·softmax)/W_c. The step is then
    shrunk (bisection on its length) until KL(new ‖ init) ≤ ``max_kl`` and, if given,
    KL(new ‖ sim) ≤ ``max_step_kl``. ``init_sim`` defaults to :func:`init_simulator` with
    ``sim``'s settings. A non-learning simulator is returned unchanged.

    Without records (or with zero weights: every batch dropped by the difficulty filter) the
    likelihood term vanishes and the step follows −kl_coef·∇KL alone, back towards ``init_sim``;
    this is how a simulator whose tasks became too easy for the agent makes them harder again.
    At ``init_sim`` (or with ``kl_coef=0``) that step is zero and ``sim`` is returned as is.
    """
    if not sim.learning:
        return sim
    init = init_sim or init_simulator(sim.max_len, sim.min_len, sim.render_seed, contexts=sim.contexts, tilt=sim.tilt)
    counts = {t: np.zeros_like(getattr(sim, t)) for t in TABLES}
    total = np.zeros(len(sim.contexts))  # Σw per context
    for n, (plan, w) in enumerate(records):
        if w < 0 or not math.isfinite(w):
            raise ValueError(f"record {n}: RWR weight must be finite and ≥ 0; got {w}")
        c = _context_index(sim, plan_context(plan))
        dec = _decisions(sim, plan, c)
        if dec is None:
            raise ValueError(f"record {n}: the simulator cannot generate this plan (length, chaining or "
                             f"rendering under seed {sim.render_seed}): {plan.to_json()}")
        for t, i in dec:
            counts[t][i] += w
        total[c] += w
    per_context = np.where(total > 0, 1.0 / np.maximum(total, 1e-300), 0.0)
    weights = _kl_weights(init)
    step = {}
    for t in TABLES:
        z = getattr(sim, t)
        p = np.exp(_log_softmax(z))
        norm = per_context.reshape((-1,) + (1,) * (z.ndim - 1))
        grad_ll = (counts[t] - counts[t].sum(axis=-1, keepdims=True) * p) * norm
        grad_kl = weights[t][..., None] * _row_kl(z, getattr(init, t))[1]
        step[t] = np.where(np.isfinite(z), lr * (grad_ll - kl_coef * grad_kl), 0.0)
    if not any(np.any(v) for v in step.values()):
        return sim  # nothing kept and already at the initial simulator (or no KL term): nothing to do

    def moved(frac: float) -> Simulator:
        return _with(sim, {t: getattr(sim, t) + frac * step[t] for t in TABLES}, updates=sim.updates + 1)

    def ok(s: Simulator) -> bool:
        return simulator_kl(s, init) <= max_kl and (max_step_kl is None or simulator_kl(s, sim) <= max_step_kl)

    if ok(moved(1.0)):
        return moved(1.0)
    lo, hi = 0.0, 1.0  # assumes the old simulator satisfies the caps (it does if it came from here)
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(moved(mid)) else (lo, mid)
    return moved(lo)

