"""Registered experiments (one line each, imported lazily)."""

from __future__ import annotations

from aicache.experiments.base import Experiment
from aicache.registry import Registry

EXPERIMENTS: Registry[type[Experiment]] = Registry("experiment")

EXPERIMENTS.register("cache-policies", "aicache.experiments.cache_policies:CachePolicies", "eviction-policy MRCs (libCacheSim-style)")
EXPERIMENTS.register("chiron-e2e", "aicache.experiments.chiron:EndToEnd", "Chiron Fig. 11/12: W1-W3, T1-T6 x systems")
EXPERIMENTS.register("chiron-micro", "aicache.experiments.chiron:Micro", "Chiron Fig. 13: eviction/prefetch on W3")
EXPERIMENTS.register("chiron-ablation", "aicache.experiments.chiron:Ablation", "Chiron Fig. 14: gate, reflection, statistics")
EXPERIMENTS.register("chiron-1tb", "aicache.experiments.chiron:OneTB", "Chiron Fig. 16: W1 at ~1 TB")
EXPERIMENTS.register("chiron-heldout", "aicache.experiments.chiron_heldout:HeldOut", "Chiron on held-out workflows H1-H5; T1-T6 over seeds 0-9")
EXPERIMENTS.register("chiron-advisors", "aicache.experiments.chiron_figs:Advisors", "Chiron Fig. 15: statistical / local LLM / oracle / noisy advisors")
EXPERIMENTS.register("chiron-async", "aicache.experiments.chiron_figs:Asynchrony", "Chiron asynchrony: advice delay 1 ms-60 s, real LLM latency")
EXPERIMENTS.register("chiron-confidence", "aicache.experiments.chiron_figs:Confidence", "Chiron Fig. 9: confidence over time, gate filter")
EXPERIMENTS.register("chiron-statistics", "aicache.experiments.chiron_figs:Statistics", "Chiron Fig. 14a: statistics on/off with the real LLM")
EXPERIMENTS.register("chiron-interval", "aicache.experiments.chiron_figs:Interval", "Chiron Fig. 10: diagnosis interval 30/45/60 s")
EXPERIMENTS.register("chiron-theta", "aicache.experiments.chiron_figs:Theta", "Chiron Fig. 17: reflection threshold 0.10/0.20/0.40")
EXPERIMENTS.register("chiron-diagnosis", "aicache.experiments.chiron:Diagnosis", "statistical advisor accuracy")
EXPERIMENTS.register("datacache-real", "aicache.experiments.datacache_real:DatacacheReal", "real engine: W1-like PyTorch job over S3")
EXPERIMENTS.register("saria-agent", "aicache.experiments.saria:Fig10", "SARIA Fig. 10 on agent sessions")
EXPERIMENTS.register("saria-weka", "aicache.experiments.saria:Fig10Weka", "SARIA Fig. 10 on WEKA-like streams")
EXPERIMENTS.register("saria-observations", "aicache.experiments.saria:Observations", "SARIA Fig. 3/4")
EXPERIMENTS.register("saria-pressure", "aicache.experiments.saria:Pressure", "SARIA Fig. 11")
EXPERIMENTS.register("saria-ablation", "aicache.experiments.saria:Ablation", "SARIA Fig. 12")
EXPERIMENTS.register("saria-admission", "aicache.experiments.saria:Admission", "SARIA Fig. 13")
EXPERIMENTS.register("saria-metadata", "aicache.experiments.saria:Metadata", "SARIA Fig. 14")
EXPERIMENTS.register("saria-promotion", "aicache.experiments.saria:Promotion", "SARIA Fig. 15")
EXPERIMENTS.register("saria-coordination", "aicache.experiments.saria:Coordination", "SARIA Fig. 16")
EXPERIMENTS.register("saria-mooncake", "aicache.experiments.saria:Mooncake", "SARIA on a Mooncake-shaped trace")
EXPERIMENTS.register("saecache-capacity", "aicache.experiments.saecache:Capacity", "SAECache: CHR/TTFT vs capacity, all policies")
EXPERIMENTS.register("saecache-mismatch", "aicache.experiments.saecache:Mismatch", "SAECache: fixed vs online parameters under mismatch")
EXPERIMENTS.register("saecache-ablation", "aicache.experiments.saecache:Ablation", "SAECache: each priority factor off")
EXPERIMENTS.register("saecache-overhead", "aicache.experiments.saecache:Overhead", "SAECache: per-decision cost vs LRU")
EXPERIMENTS.register("saecache-mooncake", "aicache.experiments.saecache:MooncakeTrace", "SAECache: CHR vs capacity on the shipped Mooncake trace")
EXPERIMENTS.register("saria-saecache", "aicache.experiments.saecache:SariaSAECache", "SARIA + SAECache vs SARIA + LRU DRAM order (agent)")

__all__ = ["EXPERIMENTS", "Experiment"]
