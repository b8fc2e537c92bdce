"""A tiny OpenAI-compatible server for the load generator's and the vLLM backend's tests (no vLLM needed).

It answers ``/health``, ``/v1/models``, ``/metrics`` (vLLM's spec-decode counters, growing with every
request when ``--spec K`` is given) and streamed ``/v1/completions``: the reply to a prompt is a fixed
function of the prompt (the same tokens for the same prompt, on every server), one token every
``--token-ms`` milliseconds, several per chunk when ``--spec`` is given (as a speculative server sends
them). Requests are served concurrently (one thread each).

Run as ``python tests/openai_stub.py --port P [--spec K] [--token-ms MS] [--ready-after S] [--exit-at-start]
[--differ-at N]``; ``--exit-at-start`` prints an error and exits (a server that crashes while loading);
``--ready-after`` answers /health with 503 for that many seconds (a model that takes long to load).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VOCAB = 1000


def reply_ids(prompt, n: int, differ_at: int | None = None) -> list[int]:
    """The stub model's greedy answer: tokens from the prompt's ids (or characters), deterministic."""
    seed = sum(prompt) if isinstance(prompt, list) else sum(map(ord, prompt))
    ids = [(seed * 31 + i * 17) % VOCAB for i in range(n)]
    if differ_at is not None and differ_at < n:
        ids[differ_at] = (ids[differ_at] + 1) % VOCAB
    return ids


class State:
    def __init__(self, spec: int, token_ms: float, ready_at: float, differ_at: int | None):
        self.spec, self.token_ms, self.ready_at, self.differ_at = spec, token_ms, ready_at, differ_at
        self.lock = threading.Lock()
        self.drafts = self.draft_tokens = self.accepted = 0
        self.per_pos = [0] * max(spec, 0)


def handler_for(state: State):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._send(200 if time.monotonic() >= state.ready_at else 503, "{}")
            elif self.path == "/v1/models":
                self._send(200, json.dumps({"data": [{"id": "stub-model"}]}))
            elif self.path == "/metrics":
                lines = []
                if state.spec:
                    with state.lock:
                        lines += ["# TYPE vllm:spec_decode_num_drafts counter",
                                  f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="stub"}} {state.drafts}.0',
                                  "# TYPE vllm:spec_decode_num_draft_tokens counter",
                                  f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="stub"}} {state.draft_tokens}.0',
                                  "# TYPE vllm:spec_decode_num_accepted_tokens counter",
                                  f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="stub"}} {state.accepted}.0',
                                  "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter"]
                        lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="stub",'
                                  f'position="{i}"}} {v}.0' for i, v in enumerate(state.per_pos)]
                self._send(200, "\n".join(lines) + "\n", "text/plain; version=0.0.4")
            else:
                self._send(404, "{}")

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path != "/v1/completions":
                self._send(404, "{}")
                return
            n = int(body.get("max_tokens", 16))
            ids = reply_ids(body["prompt"], n, state.differ_at if state.spec else None)
            per_chunk = state.spec + 1 if state.spec else 1
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def event(obj) -> None:
                data = f"data: {json.dumps(obj)}\n\n".encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            for start in range(0, n, per_chunk):
                chunk = ids[start:start + per_chunk]
                time.sleep(state.token_ms / 1000.0)
                choice = {"index": 0, "text": "".join(f"<{t}>" for t in chunk), "token_ids": chunk,
                          "finish_reason": "length" if start + per_chunk >= n else None}
                if body.get("logprobs"):
                    choice["logprobs"] = {"top_logprobs": [{f"token_id:{t}": -0.1, f"token_id:{(t + 1) % VOCAB}": -3.0}
                                                           for t in chunk]}
                event({"choices": [choice]})
                if state.spec:
                    with state.lock:
                        state.drafts += 1
                        state.draft_tokens += state.spec
                        state.accepted += len(chunk) - 1
                        for i in range(len(chunk) - 1):
                            state.per_pos[i] += 1
            event({"choices": [], "usage": {"completion_tokens": n}})
            data = b"data: [DONE]\n\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n0\r\n\r\n")
            self.wfile.flush()

    return Handler


def serve(port: int, spec: int = 0, token_ms: float = 2.0, ready_after: float = 0.0,
          differ_at: int | None = None) -> ThreadingHTTPServer:
    """Start the stub on 127.0.0.1:``port`` in a background thread; return the server (``shutdown()`` stops it)."""
    state = State(spec, token_ms, time.monotonic() + ready_after, differ_at)
    server = ThreadingHTTPServer(("127.0.0.1", port), handler_for(state))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--spec", type=int, default=0)
    p.add_argument("--token-ms", type=float, default=2.0)
    p.add_argument("--ready-after", type=float, default=0.0)
    p.add_argument("--differ-at", type=int, default=None)
    p.add_argument("--exit-at-start", action="store_true")
    args, _ = p.parse_known_args(argv)
    if args.exit_at_start:
        print("ValueError: the stub was told to fail while loading", flush=True)
        return 1
    try:
        server = serve(args.port, args.spec, args.token_ms, args.ready_after, args.differ_at)
    except OSError as exc:
        print(f"ERROR: [Errno 98] error while attempting to bind: address already in use ({exc})", flush=True)
        return 1
    print(f"stub serving on {args.port}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
