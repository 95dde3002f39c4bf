"""evokit: verified, ever-harder terminal environments for RL agents (EE and GenEnv)."""

__version__ = "0.1.0"
