"""Keeping a store bounded and sound: prune plans, verify and repair, size limits."""

from gtcache.policies._units import parse_duration, parse_size
from gtcache.policies.limits import Limits, enforce_limits
from gtcache.policies.prune import PrunePlan, PrunePolicy, Removal, plan_prune
from gtcache.policies.verify import Problem, VerifyReport, verify

__all__ = [
    "Limits",
    "Problem",
    "PrunePlan",
    "PrunePolicy",
    "Removal",
    "VerifyReport",
    "enforce_limits",
    "parse_duration",
    "parse_size",
    "plan_prune",
    "verify",
]
