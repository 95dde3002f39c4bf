"""The papers' reported numbers, each cited to its table or figure (from ../shared/papers.md).

This is the only place a number from a paper appears; figures draw these beside evokit's
measurements and label them "paper". Nothing here is computed.
"""

from __future__ import annotations

EE = "EE (arXiv:2609.04128)"
GENENV = "GenEnv (arXiv:2512.19682)"

# EE, "Experimental setup"
EE_SEEDS = 500  # seeds after filtering and top-up
EE_GENERATIONS = 15  # generations per lineage; pass rates reach 0 by the 15th
EE_ROLLOUTS = 8  # rollouts per environment for pass rates and GRPO groups (B)
EE_TAU = 6 / 8  # EL scheduler, advance threshold (strict >)
EE_GRPO_STEPS = 200

# EE, effort ablation (reported qualitatively, no curve values): within EE_GENERATIONS generations,
# does the reference models' pass rate reach 0, and does it fall monotonically?
EE_EFFORT_REACHES_ZERO = {"low": False, "high": True, "max": True}  # low "never reaches 0"
EE_EFFORT_MONOTONE = {"low": False, "high": True, "max": True}  # low "fluctuates"; max reaches 0 sooner

# EE Table 1: per-direction effect of one evolution step at high effort
EE_TABLE1 = {
    # direction: (ΔPass pts, ΔTurns, instruction %, environment %, verification %, total %)
    "scenario, 1 step": (-4.7, 13.5, 99.8, 59.6, 53.8, 71.1),
    "skill, 1 step": (-4.0, 12.5, 99.1, 50.3, 58.4, 69.3),
    "length, 1 step": (-7.1, 9.4, 87.5, 45.2, 58.6, 63.8),
    "scenario, mean of 15": (-2.9, 9.5, None, None, None, 58.5),
    "skill, mean of 15": (-2.7, 10.6, None, None, None, 56.7),
    "length, mean of 15": (-4.8, 7.4, None, None, None, 56.2),
}
EE_TABLE1_COLUMNS = ("d_pass_pts", "d_turns", "instruction", "environment", "verification", "total")

# EE main results (Terminal-Bench 2.1 Verified, mean of 5 runs; peaks, %)
EE_PEAK_TB21 = {
    "27B": {"evolution": 71.5, "co-evolution": 62.9, "ensemble": 60.0},
    "35B-A3B": {"evolution": 64.9, "co-evolution": 55.1, "ensemble": 52.8},
}
EE_GAIN_TB21 = {"27B": 14.4, "35B-A3B": 18.0}  # points after 200 GRPO steps
EE_TOKENS_PER_TURN = {"27B": (951, 1221), "35B-A3B": (947, 1103)}  # start → end of training
EE_TURNS_27B_END = 190  # turns per trajectory late in training, roughly

# GenEnv (7B) training dynamics, epochs 1–6 (training-dynamics table)
GENENV_EPOCHS = [1, 2, 3, 4, 5, 6]
GENENV_SUCCESS = [0.138, 0.425, 0.488, 0.505, 0.517, 0.524]  # agent success on generated tasks
GENENV_RESPONSE_TOKENS = [137, 147, 160, 174, 187, 204]
GENENV_ALPHA, GENENV_K_MIN, GENENV_LAMBDA = 0.5, 0.1, 1.0  # Eqs. 2–3, difficulty filter, RWR weight
GENENV_ZONE = (0.4, 0.6)  # training dynamics: success enters this zone at epoch 2
GENENV_VS_RANDOM = {"fully_solved_pct_more": 3.5, "unsolved_pct_fewer": 20.3}  # vs a random simulator, per batch
# Data efficiency on BFCL validation
GENENV_DATA_EFFICIENCY = {
    "GenEnv": 0.458,
    "Gemini-2.5-Pro augmentation, 3.3x data": 0.438,
    "Gemini-2.5-Pro augmentation, ~1.8x data": 0.434,
    "static augmentation": 0.432,
    "random simulator": 0.408,
}

# GRPO facts both papers rely on
DEAD_GROUP_EXAMPLES = {(0.05, 8): 0.66, (0.9, 8): 0.43}  # p^G + (1-p)^G
