"""Trace format readers/writers, one module per format (registered in aicache.traces.FORMATS)."""
