"""KV-cache policies: radix metadata, SARIA admission/promotion/planning/pacing, SAECache."""
