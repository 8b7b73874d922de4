# The two commands of the README:
#   make demo   - set up what the demo needs (.venv with aicache[demo]: the CPU torch and
#                 moto; no LLM build, no serving engine) and run the headline comparison
#   make test   - set up everything (aicache[test], upgrading a demo venv) and run the suite
.PHONY: demo test test-pure setup bench

setup:
	bash scripts/setup.sh test

demo:
	bash scripts/setup.sh demo
	.venv/bin/aicache demo

# AICACHE_EXPECT_COMPILED: the install must have compiled the hot path (a silent pure
# fallback fails tests/repo/test_native_build.py)
test: setup
	AICACHE_EXPECT_COMPILED=1 .venv/bin/python -m pytest -q

# the lockstep and contract tests on the pure-Python path (the default run uses the
# compiled hot path where the install built it; see aicache.native)
test-pure: setup
	AICACHE_PURE_PYTHON=1 .venv/bin/python -m pytest -q tests/policies/test_policies_vs_libcachesim.py \
		tests/policies/test_policy_contract.py tests/core/test_native.py tests/sim/test_sim_mrc.py \
		tests/kv/test_saecache_policy.py tests/kv/test_saecache_seed.py tests/policies/test_slotcore.py \
		tests/traces/test_text_traces_vs_libcachesim.py

bench: setup
	for b in benchmarks/*.py; do .venv/bin/python $$b || exit 1; done
