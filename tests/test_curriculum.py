"""Curricula (evokit.curriculum): every EL transition from a table (stay, the τ boundary with a strict
and a non-strict inequality, next k, next generation, end of lineage, gaps, the starting
generation), several lineages at once, asynchronous (stale) updates; random order covers every
environment uniformly (chi-square with a fixed seed); D_T order serves environments by ascending D_T;
each is a task source (evokit.sources) that a generic loop drives through the one protocol.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from evokit.curriculum import (
    EL,
    DTOrder,
    ELConfig,
    EnvRow,
    RandomOrder,
    env_rows,
    lineage_envs,
    lineage_sizes,
)
from evokit.grpo import GroupStats
from evokit.sources import GroupResult, Run, make_source

SIZES = [1, 2, 3]  # N_{i,g}: the seed (g = 0), two environments in g = 1, three in g = 2
STRICT, LOOSE = ELConfig(start_generation=1), ELConfig(strict=False, start_generation=1)  # from the first evolved generation
RUN = Run(8, seed=0)


def el(sizes: dict[str, list[int]], cfg: ELConfig = STRICT) -> tuple[EL, object]:
    """EL over lineages given as N_{i,g} per generation, and its initial state."""
    src = EL(tuple(EnvRow(lin, g, k) for lin, n in sizes.items() for g, m in enumerate(n)
                   for k in range(1, m + 1)), cfg)
    return src, src.init(RUN)


def at(sizes, g, k, cfg=STRICT, lineage="L"):
    """EL and a state whose single lineage stands at (g, k)."""
    src, s = el({lineage: sizes}, cfg)
    return src, dataclasses.replace(s, cursors=(dataclasses.replace(s.cursors[0], generation=g, k=k),))


def dt(d_t: dict, cfg: ELConfig = ELConfig(), width: int | None = None) -> tuple[DTOrder, object]:
    """D_T order over environments given as {id: D_T}, and its initial state."""
    src = DTOrder(tuple(EnvRow(*env, d) for env, d in d_t.items()), cfg, width)
    return src, src.init(RUN)


# (name, sizes, config, start (g, k), p̂, expected (g, k, done))
TRANSITIONS = [
    ("stay: p̂ below τ", SIZES, STRICT, (1, 1), 0.5, (1, 1, False)),
    ("stay: p̂ = 0", SIZES, STRICT, (1, 2), 0.0, (1, 2, False)),
    ("stay: p̂ = τ exactly (strict >)", SIZES, STRICT, (1, 1), 6 / 8, (1, 1, False)),
    ("advance: p̂ = τ exactly, non-strict ≥", SIZES, LOOSE, (1, 1), 6 / 8, (1, 2, False)),
    ("stay: p̂ = 5/8 < τ, non-strict", SIZES, LOOSE, (1, 1), 5 / 8, (1, 1, False)),
    ("next k: 7/8 > τ, k < N", SIZES, STRICT, (1, 1), 7 / 8, (1, 2, False)),
    ("next k inside a later generation", SIZES, STRICT, (2, 2), 1.0, (2, 3, False)),
    ("next generation: k = N", SIZES, STRICT, (1, 2), 1.0, (2, 1, False)),
    ("end of lineage: last k of last generation", SIZES, STRICT, (2, 3), 7 / 8, (2, 3, True)),
    ("no advance at the end when p̂ ≤ τ", SIZES, STRICT, (2, 3), 6 / 8, (2, 3, False)),
    ("a generation with N = 0 ends the lineage", [1, 2, 0, 3], STRICT, (1, 2), 1.0, (1, 2, True)),
    ("custom τ = 1/2", SIZES, ELConfig(tau=0.5), (1, 1), 5 / 8, (1, 2, False)),
    ("custom τ = 1/2 strict: 4/8 stays", SIZES, ELConfig(tau=0.5), (1, 1), 4 / 8, (1, 1, False)),
]


@pytest.mark.parametrize(("name", "sizes", "cfg", "start", "p_hat", "expected"), TRANSITIONS,
                         ids=[t[0] for t in TRANSITIONS])
def test_el_transition(name, sizes, cfg, start, p_hat, expected):
    """One update from ``start`` with pass rate p̂ lands on ``expected`` (papers.md EL rule)."""
    src, s = at(sizes, *start, cfg=cfg)
    after = src.feed(s, ("L", *start), p_hat).cursor("L")
    assert (after.generation, after.k, after.done) == expected
    assert after.updates == 1 and after.last_pass_rate == p_hat


@pytest.mark.parametrize(("cfg", "sizes", "expected"), [
    (ELConfig(), SIZES, (0, 1, False)),  # default: the earliest generation, the seed (EE)
    (STRICT, SIZES, (1, 1, False)),  # start_generation=1: the earliest evolved generation
    (ELConfig(start_generation=2), SIZES, (2, 1, False)),
    (STRICT, [1], (1, 1, True)),  # a lineage with no evolved generation is done at once
    (STRICT, [1, 0, 4], (2, 1, False)),  # the earliest generation ≥ start that exists
    (ELConfig(), [0, 2, 1], (1, 1, False)),  # a lineage given without its seed starts at generation 1
])
def test_el_starting_generation(cfg, sizes, expected):
    """EL starts every lineage at its earliest generation ≥ start_generation, or done if it has none."""
    c = el({"L": sizes}, cfg)[1].cursor("L")
    assert (c.generation, c.k, c.done) == expected


def test_successes_needed_to_advance():
    """With B = 8: strict > 6/8 needs 7 successes; the prose's ≥ needs 6."""
    assert STRICT.successes_to_advance(8) == 7 and LOOSE.successes_to_advance(8) == 6
    assert STRICT.successes_to_advance(4) == 4  # B = 4: 3/4 is not > 6/8


def test_always_passing_walks_every_environment_in_order():
    """p̂ = 1 each time visits (1,1), (1,2), (2,1), (2,2), (2,3) and then ends."""
    (src, s), seen = el({"L": SIZES}), []
    while not src.done(s):
        (env,) = src.current(s)
        seen.append(env[1:])
        s = src.feed(s, env, 1.0)
    assert seen == [(1, 1), (1, 2), (2, 1), (2, 2), (2, 3)]


def test_several_lineages_move_independently():
    """An update moves only its own lineage; done lineages drop out of the current environments."""
    src, s = el({"a": [1, 1], "b": [1, 2], "c": [1, 1, 1]})
    assert src.current(s) == [("a", 1, 1), ("b", 1, 1), ("c", 1, 1)]
    s = src.feed(s, ("b", 1, 1), 1.0)
    s = src.feed(s, ("a", 1, 1), 1.0)  # a's only evolved environment passed: a is done
    s = src.feed(s, ("c", 1, 1), 0.25)
    assert src.current(s) == [("b", 1, 2), ("c", 1, 1)]
    assert s.cursor("a").done and not src.done(s)
    assert [r["lineage"] for r in s.rows()] == ["a", "b", "c"]


def test_el_draw_is_uniform_over_active_lineages_without_replacement():
    """n ≤ active: distinct lineages; n > active: whole rounds; done lineages are never served."""
    src, s = el({"a": [1, 1], "b": [1, 1], "c": [1, 1], "d": [1, 1]})
    s = src.feed(s, ("d", 1, 1), 1.0)  # d done
    rng = np.random.default_rng(0)
    s, picks = src.draw(s, rng, 3)
    assert sorted(picks) == [("a", 1, 1), ("b", 1, 1), ("c", 1, 1)]
    s, picks = src.draw(s, rng, 7)
    counts = {lin: sum(p[0] == lin for p in picks) for lin in "abc"}
    assert sorted(counts.values()) == [2, 2, 3] and all(p[0] != "d" for p in picks)
    assert {c.lineage: c.served for c in s.cursors} == {"a": counts["a"] + 1, "b": counts["b"] + 1,
                                                        "c": counts["c"] + 1, "d": 0}
    counts = dict.fromkeys("abc", 0)
    for _ in range(600):
        s, (p,) = src.draw(s, rng, 1)
        counts[p[0]] += 1
    assert all(150 < v < 250 for v in counts.values())


def test_stale_and_invalid_updates():
    """A p̂ of an environment already left (or of a done lineage) is ignored; bad p̂ and lineages are refused."""
    src, s = el({"L": SIZES})
    s = src.feed(s, ("L", 1, 1), 1.0)  # now at (1, 2)
    assert src.feed(s, ("L", 1, 1), 1.0) is s
    assert src.feed(s, ("L", 2, 1), 1.0) is s  # ahead of the cursor: never served, ignored too
    assert src.feed(s, ("L", 1, 2), 1.0).cursor("L").env == ("L", 2, 1)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        src.feed(s, ("L", 1, 2), 1.5)
    with pytest.raises(KeyError, match="unknown lineage"):
        src.feed(s, ("nope", 1, 1), 1.0)
    src, s = at(SIZES, 2, 3)
    done = src.feed(s, ("L", 2, 3), 1.0)
    assert done.cursor("L").done and src.feed(done, ("L", 2, 3), 1.0) is done  # async: ignored, no error


def test_random_order_covers_all_environments_uniformly():
    """Chi-square over 12 environments × 2,400 draws stays below the 99.9 % critical value (df 11: 31.3)."""
    envs = [(lin, g, k) for lin in "ab" for g, n in ((1, 2), (2, 4)) for k in range(1, n + 1)]
    src = RandomOrder(tuple(EnvRow(*e) for e in envs))
    s, rng = src.init(RUN), np.random.default_rng(7)
    counts = dict.fromkeys(envs, 0)
    for _ in range(600):
        s, picks = src.draw(s, rng, 4)
        assert len(set(picks)) == 4  # distinct within a call
        for p in picks:
            counts[p] += 1
    expected = 2400 / len(envs)
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 31.3, counts
    assert s.step == 600 and src.feed(s, envs[0], 1.0) is s  # pass rates change nothing
    first = src.draw(src.init(RUN), np.random.default_rng(7), 4)[1]
    assert src.draw(src.init(RUN), np.random.default_rng(7), 4)[1] == first  # same seed, same picks


def test_dt_order_serves_ascending_difficulty():
    """Width 1: always passing visits environments in ascending D_T; failing stays; retired envs are ignored."""
    d_t = {("a", 1, 1): 5.0, ("a", 1, 2): 2.0, ("b", 1, 1): 9.0, ("b", 2, 1): 1.0, ("c", 1, 1): 3.0}
    src, s = dt(d_t, width=1)
    rng = np.random.default_rng(0)
    seen = []
    while src.current(s):
        s, (env,) = src.draw(s, rng, 1)
        s = src.feed(s, env, 0.5)  # p̂ ≤ τ: stays
        assert src.current(s) == [env]
        s = src.feed(s, env, 1.0)
        seen.append(env)
    assert [d_t[e] for e in seen] == sorted(d_t.values())
    assert src.feed(s, seen[0], 1.0) is s and src.done(s)


def test_dt_order_frontier_width_and_errors():
    """The default width is the number of lineages; updates off the frontier and missing D_T are refused."""
    d_t = {("a", 1, 1): 5.0, ("a", 1, 2): 2.0, ("b", 1, 1): 9.0, ("b", 2, 1): 1.0}
    src, s = dt(d_t)
    assert s.width == 2 and src.current(s) == [("b", 2, 1), ("a", 1, 2)]
    s = src.feed(s, ("b", 2, 1), 7 / 8)
    assert src.current(s) == [("a", 1, 2), ("a", 1, 1)]
    assert src.current(src.feed(s, ("a", 1, 2), 6 / 8)) == [("a", 1, 2), ("a", 1, 1)]  # strict
    assert src.current(src.feed(dataclasses.replace(s, config=LOOSE), ("a", 1, 2), 6 / 8))[0] == ("a", 1, 1)
    with pytest.raises(ValueError, match="frontier"):
        src.feed(s, ("b", 1, 1), 1.0)
    with pytest.raises(ValueError, match="D_T"):
        dt({("a", 1, 1): None})


ROWS = [EnvRow("a", 0, 1, 0.5), EnvRow("a", 1, 1, 4.0), EnvRow("a", 1, 2, 6.0), EnvRow("a", 2, 1, 8.0),
        EnvRow("b", 0, 1, 0.7), EnvRow("b", 1, 1, 5.0)]


def result(ref, pass_rate: float, n: int = 8) -> GroupResult:
    solved = round(pass_rate * n)
    return GroupResult(ref, GroupStats((1.0,) * solved + (0.0,) * (n - solved), 0))


@pytest.mark.parametrize(("name", "kind"), [("el", EL), ("random", RandomOrder), ("dt", DTOrder)])
def test_one_interface_for_all_three(name, kind, tmp_path):
    """make_source builds each order over the same evolved environments; a generic loop drives it."""
    rows = [r._replace(path=tmp_path / f"{r.lineage}-{r.generation}-{r.k}") for r in ROWS]
    src = make_source(name, envs=tuple(rows))
    assert isinstance(src, kind) and src.name == name
    state = src.init(Run(8, seed=0))
    rng = np.random.default_rng(0)
    served = set()
    for _ in range(50):
        if src.done(state):
            break
        state, refs = src.sample(state, rng, 2)
        for ref in refs:
            served.add(ref.key)
            assert ref.path == tmp_path / "-".join(map(str, ref.key))
        state = src.update(state, [result(ref, 1.0) for ref in refs])
        assert isinstance(src.summary(state), dict)
    assert served == {(r.lineage, r.generation, r.k) for r in ROWS}  # seeds (generation 0) included: EE's start
    assert src.done(state) == (name != "random")


def test_el_source_ignores_groups_without_usable_rollouts(tmp_path):
    """A group whose rollouts were all masked (no p̂) leaves EL where it is; a failing one too."""
    src = make_source("el", envs=lineage_envs({"L": [tmp_path / "a", tmp_path / "b"]}))
    state = src.init(Run(4))
    state, refs = src.sample(state, np.random.default_rng(0), 1)
    assert refs[0].key == ("L", 1, 1) and refs[0].path == tmp_path / "a"
    state = src.update(state, [GroupResult(refs[0], GroupStats((), 4)), result(refs[0], 0.25, 4)])
    assert src.current(state) == [("L", 1, 1)]
    state = src.update(state, [result(refs[0], 1.0, 4)])
    assert src.current(state) == [("L", 2, 1)]


def test_env_rows_and_sizes_from_store_records():
    """Rows come from store-like dicts (D_T under difficulty.total); k must run 1..N per generation."""
    rows = env_rows([{"kind": "env", "lineage": "s1", "generation": 1, "k": 1, "difficulty": {"total": 3.5}},
                     {"lineage": "s1", "generation": 0, "k": 1}, ("s2", 1, 1, 2.0)])
    assert rows == [EnvRow("s1", 1, 1, 3.5), EnvRow("s1", 0, 1, None), EnvRow("s2", 1, 1, 2.0)]
    assert lineage_sizes(rows) == {"s1": [1, 1], "s2": [0, 1]}
    with pytest.raises(ValueError, match="k must run"):
        lineage_sizes([EnvRow("x", 1, 2)])
    with pytest.raises(ValueError, match="unknown task source 'nope'"):
        make_source("nope", envs=tuple(ROWS))


def test_config_validation():
    """τ outside [0, 1] and a negative start generation are refused with the field's name; B < 1 by the run."""
    for bad, field in (({"tau": 1.5}, "tau"), ({"start_generation": -1}, "start_generation")):
        with pytest.raises(ValueError, match=field):
            ELConfig(**bad)
    with pytest.raises(ValueError, match="group size B"):
        Run(0)
