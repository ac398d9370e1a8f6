"""Keeping a store bounded and sound: prune plans, verify and repair, size limits."""

from gtcache.policies._units import parse_duration, parse_size
from gtcache.policies.limits import Limits, enforce_limits
from gtcache.policies.prune import (
    PruneOutcome,
    PrunePlan,
    PrunePolicy,
    Removal,
    backend_glob,
    matches,
    plan_prune,
    plan_removal,
)
from gtcache.policies.verify import Problem, ProblemKind, VerifyReport, verify

__all__ = [
    "Limits",
    "Problem",
    "ProblemKind",
    "PruneOutcome",
    "PrunePlan",
    "PrunePolicy",
    "Removal",
    "VerifyReport",
    "backend_glob",
    "enforce_limits",
    "matches",
    "parse_duration",
    "parse_size",
    "plan_prune",
    "plan_removal",
    "verify",
]
