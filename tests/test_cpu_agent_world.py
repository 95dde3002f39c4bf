"""The world a solver's corpus comes from: seeded, mixture-weighted, finite, in the catalog's vocabulary."""

from __future__ import annotations

import pytest

from evokit.catalog import SCENARIOS, compatible
from evokit.cpu_agent.world import (
    CorpusConfig,
    Mixture,
    corpus_counts,
    output_shape,
    sample_corpus,
    world_distribution,
)


def test_same_config_same_corpus_other_seed_other_corpus():
    a = sample_corpus(CorpusConfig(size=60, seed=4))
    assert a == sample_corpus(CorpusConfig(size=60, seed=4))
    assert a != sample_corpus(CorpusConfig(size=60, seed=5))
    assert len(a) == 60 and all(compatible(st.scenario, st.skill) for st in a)
    assert all(st.goal and "/app/out/step1.txt" in st.goal for st in a)  # the sentence an agent reads


def test_a_mixture_shifts_the_corpus_toward_its_domain():
    """Domain share of logs in 150 drawn steps: up under a logs-heavy mixture, down under a
    sysadmin-heavy one, for each of 5 seeds (a seeded finite sample, not the expectation)."""
    logs = Mixture("logs", (("logs", 6.0),))
    sys_ = Mixture("sys", (("sysadmin", 6.0),))
    for seed in range(5):
        share = {m.name: sum(SCENARIOS[st.scenario].domain == "logs"
                             for st in sample_corpus(CorpusConfig(m, 150, seed))) / 150 for m in (logs, sys_)}
        assert share["logs"] > share["sys"] + 0.15, share


def test_finite_corpus_misses_rare_pairs():
    """A 200-step corpus leaves some compatible pairs unseen (what makes a solver's knowledge imperfect)."""
    pairs, p = world_distribution(Mixture("world"))
    assert abs(p.sum() - 1) < 1e-9 and len(pairs) == len(set(pairs))
    seen = corpus_counts(sample_corpus(CorpusConfig(size=200, seed=0)))
    assert 0 < len(seen) < len(pairs)


def test_output_shape_and_bad_mixture():
    assert output_shape("3 /a\n2 /b\n1 /c\n") == "L2-5|F2|N"
    assert output_shape("42\n") == "L1|F1|N" and output_shape("") == "L0"
    assert output_shape("\n".join(f"host{i}" for i in range(30))) == "L21+|F1|T"
    with pytest.raises(ValueError, match="weight of 'logs'"):
        Mixture("neg", (("logs", -1.0),))
    with pytest.raises(ValueError, match="every scenario weight 0"):
        world_distribution(Mixture("none", tuple((d, 0.0) for d in {s.domain for s in SCENARIOS.values()})))
