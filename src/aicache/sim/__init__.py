"""Simulators: drive the pure policies with a virtual clock and a cost model."""
