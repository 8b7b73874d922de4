"""One "node" of ``test_shared_tier``: a process of its own with a cache dir of its own.

``python shared_tier_node.py SPEC_JSON`` reads every listed file of the origin bucket whole
through the ``aicache`` fsspec filesystem (and the shared tier the spec names, if any),
closes the engine (which waits for the shared tier's writer), and prints one JSON object:
each file's SHA-256 and the engine's counters.
"""

from __future__ import annotations

import hashlib
import json
import sys


def main(spec_text: str) -> None:
    spec = json.loads(spec_text)
    import fsspec

    import aicache.datacache.fs  # noqa: F401 - registers the "aicache" protocol
    from aicache.datacache.counters import PERSISTED

    def s3(endpoint: str) -> dict[str, object]:
        return {"key": "testing", "secret": "testing", "client_kwargs": {"endpoint_url": endpoint}}

    options: dict[str, object] = dict(
        target_protocol="s3", target_options={**s3(spec["origin"]), "use_listings_cache": False},
        cache_dir=spec["cache_dir"], cache_size="64MiB", block_size=spec["block_size"],
        policy="lru", skip_instance_cache=True)
    if spec.get("shared"):
        options.update(shared_cache=spec["shared_url"], shared_cache_options=s3(spec["shared"]),
                       shared_cache_timeout=spec.get("timeout", 2.0))
    fs = fsspec.filesystem("aicache", **options)
    digests = {p: hashlib.sha256(fs.cat_file(p)).hexdigest() for p in spec["files"]}
    engine = fs.engine
    engine.close()  # waits for the shared tier's writer: the counters are final
    stats = {k: engine.metrics.value(k) for k in PERSISTED}
    print(json.dumps({"digests": digests, "stats": stats}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
