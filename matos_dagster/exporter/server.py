"""The exporter's HTTP server: /metrics in Prometheus' text format, with TLS and basic auth if asked.

prometheus_client's WSGI app behind a check of the `Authorization` header (compared in constant
time), served by a threading WSGI server whose socket is wrapped in TLS when a certificate is given.
"""

from __future__ import annotations

import base64
import hmac
import ssl
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer


class _Quiet(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - a line per scrape would flood the log
        pass


def _with_basic_auth(app, user: str, password: str):
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def guarded(environ, start_response):
        given = environ.get("HTTP_AUTHORIZATION", "")
        if not hmac.compare_digest(given.encode(), expected.encode()):
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="matos metrics"'),
                                                ("Content-Type", "text/plain")])
            return [b"basic authentication required\n"]
        return app(environ, start_response)

    return guarded


class Server:
    """Serving in a thread of its own from `start()` until `stop()`; `url` says where."""

    def __init__(self, registry: CollectorRegistry, address: str = "0.0.0.0", port: int = 9464,
                 tls_cert: str | None = None, tls_key: str | None = None, user: str | None = None,
                 password: str | None = None):
        app = make_wsgi_app(registry)
        if user:
            app = _with_basic_auth(app, user, password or "")
        self.httpd = make_server(address, port, app, ThreadingWSGIServer, handler_class=_Quiet)
        self.scheme = "http"
        if tls_cert:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(tls_cert, tls_key)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="matos-metrics-http", daemon=True)

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        host = self.httpd.server_address[0]
        return f"{self.scheme}://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{self.port}/metrics"

    def start(self) -> "Server":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
