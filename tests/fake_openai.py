"""A fake OpenAI-compatible HTTP server on 127.0.0.1 for tests that talk to an endpoint:
``serve(answer)`` runs it on a daemon thread for the ``with`` block, records every request in
``.seen`` and replies to each POST with what ``answer(path, headers, body)`` returns."""

import contextlib
import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from types import SimpleNamespace


@contextlib.contextmanager
def serve(answer):
    """Yield ``.url`` (http://127.0.0.1:PORT), ``.base_url`` (``.url`` + "/v1") and ``.seen``
    (every request as ``(path, headers, body)``; body is the decoded JSON, None for a GET).
    ``answer`` returns a dict (sent as JSON with 200), or ``(status, reply)`` or
    ``(status, reply, headers)`` where reply is a dict (JSON) or str/bytes (sent as is).
    A GET (the ``/models`` reachability check) is answered ``{"data": []}``."""
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):  # noqa: N802
            seen.append((self.path, self.headers, None))
            self._send(200, {"data": []}, {})

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.path, self.headers, body))
            out = answer(self.path, self.headers, body)
            out = out if isinstance(out, tuple) else (200, out)
            self._send(out[0], out[1], out[2] if len(out) > 2 else {})

        def _send(self, status, reply, headers):
            if isinstance(reply, dict):
                data, headers = json.dumps(reply).encode(), {"Content-Type": "application/json", **headers}
            else:
                data = reply.encode() if isinstance(reply, str) else reply
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        yield SimpleNamespace(url=url, base_url=url + "/v1", seen=seen)
    finally:
        server.shutdown()
        server.server_close()
