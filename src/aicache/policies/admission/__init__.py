"""Admission policies, one per module; registered in :mod:`aicache.policies`."""
