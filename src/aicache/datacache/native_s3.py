"""Block GETs from S3 through obstore (a Rust object-store client) instead of s3fs's
aiobotocore, for ``--s3-client obstore``.

Why: the data cache's jobs on a small machine are CPU-bound, and in a mount's cold epoch the
S3 client is the largest part of the interpreter's time. One 100 kB GET costs s3fs 3.4-3.9 ms
of client CPU and obstore 0.8-0.9 ms (``benchmarks/s3_client_cost.py``), with the signing,
HTTP and body handling outside the interpreter.

Only the block reads move (:meth:`ObstoreS3Scheme.read`, the engine's one GET per block or
run of pages). Listings, ``info`` and the first-page GET of an open stay on s3fs, so
metadata and the version identity (ETag, VersionId) are exactly s3fs's. A read is pinned as
s3fs's is: by ``VersionId`` when the bucket gave one, else by ``If-Match`` on the ETag; a
missing object or version is :class:`~aicache.datacache.version.VersionGone` ("deleted"), a
failed precondition the same ("overwritten"). Every other error is raised as it is and the
engine's retries take it. obstore's runtime does not survive ``fork``: a forked process (a
DataLoader worker) reads through s3fs.

Configuration comes from the s3fs filesystem the mount opened: its endpoint, region, key,
secret and session token. ``--s3-client auto`` (the default) takes obstore only where every
setting is one s3fs would use too, given outright (credentials as options or in the
``AWS_*`` key variables without a profile, a region or an endpoint, no other client
setting), and obstore is installed; otherwise s3fs reads the blocks, as before. botocore's
other credential sources (profiles, SSO, instance roles) and the settings only s3fs applies
(a custom CA, proxies, requester pays, customer-provided encryption keys) keep s3fs.
``--s3-client obstore`` asks for it whatever the settings (obstore then resolves missing
credentials itself) and refuses what only s3fs sends; ``--s3-client s3fs`` never uses it.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import TYPE_CHECKING, Any

from aicache.datacache.version import S3Scheme, VersionGone, VersionScheme
from aicache.errors import BadInput

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem
    from obstore import GetOptions
    from obstore.store import ClientConfig, S3Config

log = logging.getLogger("aicache.datacache")

#: the process whose calls started obstore's runtime (one per process, in its native code).
#: Its threads do not survive a fork: a forked process (a DataLoader's worker), which sees
#: its parent's pid here, reads through s3fs, which fsspec re-creates after a fork.
_RUNTIME_PID: int | None = None

#: s3fs per-request options obstore does not send: a target using them stays on s3fs
_S3FS_ONLY = ("RequestPayer", "SSECustomerAlgorithm", "SSECustomerKey", "SSECustomerKeyMD5")


class ObstoreS3Scheme(S3Scheme):
    """:class:`S3Scheme` whose block reads go through obstore (module docstring)."""

    name = "s3-obstore"

    def __init__(self, config: S3Config, client_options: ClientConfig) -> None:
        import obstore
        from obstore import exceptions

        self._obstore = obstore
        self._not_found = exceptions.NotFoundError
        self._precondition = exceptions.PreconditionError
        self._config = config
        self._client_options = client_options
        self._stores: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _store(self, bucket: str) -> Any:
        """One obstore client per bucket (it keeps its connections)."""
        st = self._stores.get(bucket)
        if st is None:
            from obstore.store import S3Store

            with self._lock:
                st = self._stores.get(bucket)
                if st is None:
                    st = S3Store(bucket, config=self._config, client_options=self._client_options)
                    self._stores[bucket] = st
        return st

    def connect(self, fs: AbstractFileSystem, path: str) -> None:
        """The bucket's obstore client, built before the first read (about 10 ms that a
        mount's first GET would otherwise wait on). Not in a process that started obstore's
        runtime before a fork (its reads go through s3fs, :meth:`read`)."""
        global _RUNTIME_PID
        pid = os.getpid()
        if _RUNTIME_PID not in (None, pid):
            return
        _RUNTIME_PID = pid
        self._store(fs.split_path(path)[0])

    def read(self, fs: AbstractFileSystem, path: str, version: str, pin: str, start: int,
             end: int) -> bytes:
        if not version.startswith("etag:"):
            return VersionScheme.read(self, fs, path, version, pin, start, end)
        global _RUNTIME_PID
        pid = os.getpid()
        if _RUNTIME_PID != pid:
            if _RUNTIME_PID is not None:  # started before a fork: dead in this process
                return S3Scheme.read(self, fs, path, version, pin, start, end)
            _RUNTIME_PID = pid
        bucket, key, _ = fs.split_path(path)
        options: GetOptions = {"range": (start, end)}
        if pin:
            options["version"] = pin
        else:
            options["if_match"] = '"' + version[5:] + '"'
        try:
            got = self._obstore.get(self._store(bucket), key, options=options)
            return bytes(got.bytes())
        except (self._not_found, FileNotFoundError) as exc:
            raise VersionGone(path, version, "deleted") from exc
        except self._precondition as exc:
            raise VersionGone(path, version, "overwritten") from exc


def obstore_config(fs: AbstractFileSystem, *, explicit_only: bool
                   ) -> tuple[S3Config, ClientConfig] | str:
    """obstore's settings for the s3fs filesystem ``fs``, or why it cannot have them.

    With ``explicit_only`` (the ``auto`` client) every setting must be one s3fs would use
    too, given outright: credentials as options or the ``AWS_*`` key variables with no
    ``AWS_PROFILE`` (botocore then uses those variables), a region or an endpoint, and no
    other client setting (custom CA, proxies, signature version) — anything else is left to
    s3fs. Without it (``obstore``, asked for by name) obstore resolves what is not given."""
    req: dict[str, Any] = dict(getattr(fs, "req_kw", None) or {})
    kwargs: dict[str, Any] = dict(getattr(fs, "kwargs", None) or {})
    used = sorted(k for k in _S3FS_ONLY if k in req or k in kwargs)
    if used:
        return f"the remote's options {', '.join(used)} are sent by s3fs only"
    client_kwargs: dict[str, Any] = dict(getattr(fs, "client_kwargs", None) or {})
    if explicit_only:
        other = sorted(set(client_kwargs) - {"endpoint_url", "region_name"})
        if other or getattr(fs, "config_kwargs", None) or not getattr(fs, "use_ssl", True):
            return f"client settings only s3fs applies ({', '.join(other) or 'config_kwargs/use_ssl'})"
    env = os.environ
    # botocore's order: the client's endpoint, then the S3 and the global variables
    endpoint = (client_kwargs.get("endpoint_url") or getattr(fs, "endpoint_url", None)
                or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"))
    if not endpoint and explicit_only and _config_names_endpoint(env):
        return "an endpoint from the AWS config file (botocore reads it, obstore does not)"
    region = client_kwargs.get("region_name") or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    config: S3Config = {}
    client_options: ClientConfig = {}
    if endpoint:
        config["endpoint"] = str(endpoint)
        # a custom endpoint (MinIO, Ceph, a local server) is addressed by path, as s3fs does
        config["virtual_hosted_style_request"] = False
        if str(endpoint).startswith("http://"):
            client_options["allow_http"] = True
    if region:
        config["region"] = str(region)
    elif endpoint:
        config["region"] = "us-east-1"  # what botocore signs for on an endpoint without one
    elif explicit_only:
        return "no region given (s3fs asks the bucket for it)"
    key, secret, token = (getattr(fs, n, None) for n in ("key", "secret", "token"))
    if getattr(fs, "anon", False):
        config["skip_signature"] = True
    elif key and secret:
        config["access_key_id"], config["secret_access_key"] = str(key), str(secret)
        if token:
            config["session_token"] = str(token)
    elif env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY") and not env.get("AWS_PROFILE"):
        config["access_key_id"] = env["AWS_ACCESS_KEY_ID"]
        config["secret_access_key"] = env["AWS_SECRET_ACCESS_KEY"]
        if env.get("AWS_SESSION_TOKEN"):
            config["session_token"] = env["AWS_SESSION_TOKEN"]
    elif explicit_only:
        return "credentials from botocore's chain (a profile, SSO, an instance role)"
    return config, client_options


def _config_names_endpoint(env: os._Environ[str]) -> bool:
    """Whether the AWS config file botocore reads could set an endpoint (``endpoint_url``
    anywhere in it): then only botocore knows where requests go."""
    path = env.get("AWS_CONFIG_FILE") or os.path.expanduser("~/.aws/config")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return "endpoint_url" in f.read()
    except OSError:
        return False


def obstore_scheme(fs: AbstractFileSystem, current: VersionScheme) -> VersionScheme:
    """``--s3-client obstore``: the obstore-backed scheme for ``fs`` (an s3fs filesystem
    whose scheme is ``current``); :class:`BadInput` (exit 2) when obstore is missing, the
    target is not S3, or it uses options only s3fs sends."""
    if not isinstance(current, S3Scheme):
        raise BadInput(f"--s3-client obstore: the remote is {type(fs).__name__}, not S3; "
                       "drop the option for other stores")
    try:
        import obstore  # noqa: F401
    except ImportError:
        raise BadInput("--s3-client obstore: obstore is not installed; pip install obstore "
                       "(or use --s3-client s3fs)") from None
    got = obstore_config(fs, explicit_only=False)
    if isinstance(got, str):
        raise BadInput(f"--s3-client obstore: {got}; use --s3-client s3fs")
    return ObstoreS3Scheme(*got)


def auto_scheme(fs: AbstractFileSystem, current: VersionScheme) -> VersionScheme:
    """``--s3-client auto`` (the default): obstore for an S3 target whose settings it can
    take over exactly (:func:`obstore_config` with ``explicit_only``) when obstore is
    installed, else ``current`` (s3fs), saying why at debug level."""
    if not isinstance(current, S3Scheme):
        return current
    try:
        import obstore  # noqa: F401
    except ImportError:
        log.debug("aicache: S3 block reads through s3fs (obstore is not installed)")
        return current
    got = obstore_config(fs, explicit_only=True)
    if isinstance(got, str):
        log.debug("aicache: S3 block reads through s3fs: %s", got)
        return current
    return ObstoreS3Scheme(*got)
