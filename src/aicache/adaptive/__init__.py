"""Chiron: statistical analyzer, advisors, confidence gate, feedback, executors, controller."""
