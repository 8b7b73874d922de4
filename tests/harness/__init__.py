"""Test harnesses that tests and benchmarks share and the package does not ship.

``tests/`` is on ``sys.path`` for every test (pytest puts a rootdir-less test directory
there) and the scripts that use these put it there themselves, so they import
``harness.<module>``.
"""
