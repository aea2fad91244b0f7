"""The step's phases, in the paper's order: match (TrueSkill, PFSP), propose, validate, solve, rewards and scoring,
Task-Relative REINFORCE++ advantages and the update; the rollouts and buffers they pass on.
"""
