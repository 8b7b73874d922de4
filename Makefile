# The two commands of the README:
#   make demo   - set up (venv, pip, fuse3) and run the headline comparison (`aicache demo`)
#   make test   - set up and run the whole test suite
.PHONY: demo test setup bench

setup:
	bash scripts/setup.sh test

demo: setup
	.venv/bin/aicache demo

test: setup
	.venv/bin/python -m pytest -q

bench: setup
	for b in benchmarks/*.py; do .venv/bin/python $$b || exit 1; done
