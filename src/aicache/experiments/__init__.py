"""Registered experiments (one line each, imported lazily)."""

from __future__ import annotations

from aicache.experiments.base import Experiment
from aicache.registry import Registry

EXPERIMENTS: Registry[type[Experiment]] = Registry("experiment")

# Registered as they land, e.g.:
# EXPERIMENTS.register("chiron-e2e", "aicache.experiments.chiron:EndToEnd", "Chiron Fig. 11/12")

__all__ = ["EXPERIMENTS", "Experiment"]
