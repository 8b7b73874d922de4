"""Adapters that put aicache's policies and stores inside serving engines.

Each subpackage imports its engine and is installed by an extra (``aicache[vllm]``);
nothing here is imported by the rest of aicache.
"""
