"""The ``aicache`` command line. Each command lives in its own module here."""
