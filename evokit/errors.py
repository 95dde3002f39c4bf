"""One error hierarchy: every exception evokit raises is an :class:`EvokitError`, on one of two branches.

* :class:`UserError`: the user's or the environment's mistake, which the user can fix — bad input,
  a malformed task, a Dockerfile that will not build, a store made with other parameters, a missing
  tool or daemon, an LLM endpoint that fails. The CLI prints one line naming the problem and what to
  do, and exits 2. :class:`Unavailable` is the part of it that is the *machine's* setup (a daemon, a
  tool, a backend, an endpoint): loops that record a task's failure and go on to the next task
  (``verify``) re-raise it instead, since no task is at fault and every other task would fail alike.
* every other :class:`EvokitError`: a harness fault or a bug (a sandbox that broke under a trial, a
  verifier namespace that would not set up) or an outcome the harness handles itself (a policy's
  invalid action). Should one reach the CLI it is an internal error, exit 1, with its traceback
  under ``evokit --debug``.

Each class keeps its name, its module and its builtin base (``ValueError``, ``RuntimeError``), so
code that catches those still catches it. The classes, their branch (``EvokitError``: on neither
user branch), and why:

================================================  ===========  ======================================================
class                                             branch       why
================================================  ===========  ======================================================
``agents.InvalidAction``                          EvokitError  a model's unusable action; the agent loop answers it
``benchmark.BenchmarkError``                      UserError    a benchmark config or folder the user gave
``benchmark.BenchmarkOverlapError``               UserError    as its base
``catalog.base.CatalogError``                     UserError    an unknown scenario or skill name in a plan or spec
``cli.UserError``                                 UserError    the same class as :class:`UserError`
``evolve.baselines.BaselineError``                UserError    seeds or rollout records unfit for a baseline
``evolve.harness.ForeignSeedError``               UserError    a foreign seed task given without ``--model``
``lineage.StoreError``                            UserError    a store made with other parameters
``llm.LLMBudgetSpent``                            Unavailable  the run's ``--max-calls`` budget is spent (exit 4)
``llm.LLMError``                                  Unavailable  the LLM endpoint failed, timed out or is absent
``llm.LLMReplyError``                             UserError    the configured model's replies are never usable
``local_llm.LocalModelUnavailable``               Unavailable  llama.cpp or the model file is missing
``parallel.ParallelError``                        EvokitError  wraps the jobs' errors; the CLI reports the inner one
``plan.PlanError``                                UserError    a plan that breaks the catalog's rules
``rollout.PolicyFault``                           EvokitError  the policy's own failure, scored in its episode
``rollout.EpisodeOver``                           EvokitError  as its base
``sandbox.backend.SandboxBackendError``           Unavailable  no sandbox backend of that name, or its plug-in broke
``sandbox.build_step.ImageBuildError``            UserError    a Dockerfile step (or base image) that will not build
``sandbox.bwrap.SandboxUnavailableError``         Unavailable  bubblewrap, root or a C compiler missing
``sandbox.docker_engine.EngineUnavailableError``  Unavailable  no Docker daemon answers
``sandbox.dockerfile.DockerfileError``            UserError    a Dockerfile evokit cannot read
``sandbox.netns.NetworkSetupError``               EvokitError  slirp4netns failed under one sandbox (a harness fault)
``sandbox.oci_layers.LayerError``                 UserError    an image layer refused, or a bad ``$EVOKIT_LAYER_*``
``sandbox.oci_layers.LayerLimitError``            UserError    as its base
``sandbox.image_pull.RegistryError``              UserError    an image reference or registry that cannot serve it
``sandbox.runtime.SandboxError``                  EvokitError  a sandbox that would not start or broke (harness)
``sandbox.runtime.SandboxSabotaged``              EvokitError  the agent took over a harness process; trial scores 0
``sandbox.stages.CopyFromError``                  UserError    a Dockerfile ``COPY --from`` that cannot be done
``sandbox.task_env.TaskEnvironmentError``         UserError    a task's [environment] the sandbox cannot honour
``sandbox.transfer.TransferError``                EvokitError  a copy in or out of a sandbox refused (trial's error)
``sandbox.verifier_ns.VerifierSetupError``        EvokitError  the private verifier could not be set up (harness)
``stats.StatsError``                              UserError    too few or non-finite seeds for an interval
``sources.SourceError``                           UserError    a task source that cannot be built from its inputs
``studies.folder.StudyError``                     UserError    a study folder made with other parameters
``tasks.folder.TaskFormatError``                  UserError    a malformed task folder
``tasks.limits.LimitsError``                      UserError    task.toml limits out of range
``traces.TraceRowError``                          UserError    a rows file that is not evokit's rows
``training.settings.SettingsError``               UserError    a GRPO setting out of its range (names the field)
``train.ResumeError``                             UserError    a run folder made with another config
``trl_trainer.config.SetupError``                 UserError    a training setup that cannot work (model, device)
``verify.trial.HarnessFault``                     EvokitError  the harness failed under a trial (not the task)
``verify.trial.RewardError``                      UserError    a task's tests wrote no usable reward file
================================================  ===========  ======================================================

``parallel.JobInterrupted`` stays a ``KeyboardInterrupt`` only: it is Ctrl-C reaching a job thread,
and an ``except Exception`` must never swallow it.
"""

from __future__ import annotations


class EvokitError(Exception):
    """Base of every exception evokit defines. Not raised itself; catch it to catch evokit's errors."""


class UserError(EvokitError):
    """The user's or the environment's mistake: the message names the problem and what to do.

    The CLI prints it as one line, ``evokit: error: <message>``, and exits 2 (no traceback; ``--debug``
    shows it). Write the message so that it stands alone: where (file, line, option, variable) and
    what to change.
    """


class Unavailable(UserError):
    """Something this machine lacks or has misconfigured (a daemon, a tool, a backend, an endpoint),
    not the fault of any one task: per-task loops re-raise it rather than record it as the task's."""
