"""A real local HTTP server that speaks the OpenAI chat-completions protocol, for tests.

Each request pops the next scripted answer: ``("ok", text)`` returns ``text`` as the
assistant message, ``("slow", seconds)`` sleeps before answering, ``("hang", seconds)`` sends
nothing for that long (then closes), ``("ramble", seconds)`` streams filler for that long
(checking for a closed connection between chunks), ``("keepalive", seconds)`` sends only SSE
comment lines (``: keepalive``) every 0.2 s for that long, ``("usage", (text, usage))``
answers ``text`` reporting ``usage`` as given, ``("status", code)`` returns an HTTP error.
A callable ``answer(body) -> text`` in place of the script answers every request. Answers are
streamed as server-sent events when the request asks for ``stream``. Every request body is
kept for assertions; ``disconnects`` counts rambles and keepalives the client cut.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

USAGE = {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}


class ChatServer:
    def __init__(self, script) -> None:
        self.answer = script if callable(script) else None
        self.script = [] if callable(script) else list(script)
        self.requests: list[dict] = []
        self.disconnects = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append({"path": self.path, "body": body})
                    if server.answer is not None:
                        kind, arg = "ok", server.answer(body)
                    else:
                        kind, arg = server.script.pop(0) if server.script else ("status", 500)
                if kind == "slow":
                    time.sleep(float(arg))
                    kind, arg = "ok", '{"source": "void rmsnorm(){}", "params": {}, "rationale": "late"}'
                if kind == "hang":
                    time.sleep(float(arg))
                    self.close_connection = True
                    return
                if kind == "status":
                    data = b'{"error": {"message": "scripted failure"}}'
                    self.send_response(int(arg))
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if kind == "keepalive":
                    self._keepalive(float(arg))
                    return
                usage = USAGE
                if kind == "usage":
                    arg, usage = arg
                if kind == "ramble":
                    self._ramble(body, float(arg))
                    return
                if body.get("stream"):
                    self._stream(body, str(arg), usage)
                    return
                payload = {
                    "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "test"),
                    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": arg}}],
                    "usage": usage,
                }
                data = json.dumps(payload).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _event(self, obj) -> None:
                data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode("utf-8", "surrogatepass")) + b"\n\n"
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def _start_stream(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()

            def _chunk(self, body, content=None, finish=None, usage=None) -> dict:
                return {"id": "chatcmpl-test", "object": "chat.completion.chunk", "created": int(time.time()),
                        "model": body.get("model", "test"),
                        "choices": [] if usage else [{"index": 0, "delta": {"content": content} if content else {},
                                                      "finish_reason": finish}],
                        **({"usage": usage} if usage else {})}

            def _keepalive(self, seconds: float) -> None:
                self._start_stream()
                end = time.monotonic() + seconds
                try:
                    while time.monotonic() < end:
                        data = b": keepalive\n\n"
                        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                        self.wfile.flush()
                        time.sleep(0.2)
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    with server.lock:
                        server.disconnects += 1

            def _stream(self, body, text: str, usage=USAGE) -> None:
                self._start_stream()
                step = max(len(text) // 4, 1)
                for i in range(0, len(text), step):
                    self._event(self._chunk(body, text[i:i + step]))
                self._event(self._chunk(body, finish="stop"))
                if (body.get("stream_options") or {}).get("include_usage"):
                    self._event(self._chunk(body, usage=usage))
                self._event(b"[DONE]")
                self.wfile.write(b"0\r\n\r\n")

            def _ramble(self, body, seconds: float) -> None:
                self._start_stream()
                end = time.monotonic() + seconds
                try:
                    while time.monotonic() < end:
                        self._event(self._chunk(body, "and furthermore "))
                        time.sleep(0.02)
                    self._event(self._chunk(body, finish="length"))
                    self._event(b"[DONE]")
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    with server.lock:
                        server.disconnects += 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
