"""Agents: anything that maps an episode's observation history to its next action.

Built in (``ehrgym.agents.registry``; ``ehrgym eval run --agent NAME``): ``oracle`` (privileged,
replays the expected path), ``credulous`` (runs the clean draft SQL, answers whatever comes
back), ``skeptic`` (generic careful analyst), ``chat`` (any OpenAI-compatible server) and
``hf`` (a local Hugging Face model; optional extra ``.[hf]``). See ``ehrgym.agents.base`` for
the protocol and what each agent is entitled to know.
"""
