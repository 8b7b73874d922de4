"""The real tiered KV store: DRAM slot pool + SSD slab files driven by SARIA policies."""
