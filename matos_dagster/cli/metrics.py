"""`matos metrics`: the archive's Prometheus exporter, served until stopped (Ctrl-C, SIGTERM)."""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from matos_dagster.cli.common import Refused
from matos_dagster.exporter import DEFAULT_PORT

DESCRIPTION = ("Serve the archive's metrics in Prometheus' text format on http://ADDRESS:PORT/metrics (https with "
               "--tls-cert): per partition the offsets, the lag in records and in seconds, what was archived, the "
               "monitor's verdict, the records erased and expired; per archive the ranges requested, archived and "
               "failed, the runs, the sensors' ticks and the compaction backlog (docs/reference/metrics.md). Each "
               "scrape asks Kafka a few batched requests and reads Dagster's storage (Swift's erasure and expiry "
               "records at most once a minute); what does not answer within --timeout is served as last known "
               "with matos_up 0.")


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("--port", type=int, default=DEFAULT_PORT, help="the port to listen on")
    c.add_argument("--address", default="0.0.0.0", help="the address to listen on (127.0.0.1: this machine only)")
    c.add_argument("--timeout", type=float, default=5.0,
                   help="seconds a scrape waits for Kafka, Dagster and Swift before serving the last known values")
    c.add_argument("--tls-cert", metavar="FILE", help="serve https with this certificate (PEM; the chain after it)")
    c.add_argument("--tls-key", metavar="FILE", help="the certificate's private key (PEM), if not in --tls-cert")
    c.add_argument("--user", help="require HTTP basic authentication as this user")
    c.add_argument("--password-file", metavar="FILE", help="the basic-auth password: the file's first line")


def _refusals(args: argparse.Namespace) -> str | None:
    if not 0 < args.port < 65536:
        return f"--port {args.port}: give a port from 1 to 65535"
    if not args.timeout > 0:
        return f"--timeout {args.timeout}: give a positive number of seconds"
    if args.tls_key and not args.tls_cert:
        return "--tls-key without --tls-cert: give the certificate too"
    if bool(args.user) != bool(args.password_file):
        return "basic authentication needs both --user and --password-file"
    for option in ("tls_cert", "tls_key", "password_file"):
        path = getattr(args, option)
        if path and not Path(path).is_file():
            return f"--{option.replace('_', '-')} {path}: no such file"
    return None


def run(args: argparse.Namespace) -> int:
    refusal = _refusals(args)
    if refusal:
        raise Refused(refusal)
    password = Path(args.password_file).read_text().splitlines()[0] if args.password_file else None
    from matos_dagster.cli import archive
    from matos_dagster.exporter import serve_metrics

    chosen = archive.current()

    try:
        server = serve_metrics(chosen.topic_set, chosen.resource("kafka"), swift=chosen.resource("swift"),
                               name=chosen.names.archive, address=args.address, port=args.port,
                               timeout_s=args.timeout, tls_cert=args.tls_cert, tls_key=args.tls_key, user=args.user,
                               password=password)
    except ValueError as e:  # a Swift setting (SwiftResource.params says which)
        raise Refused(str(e)) from None
    except OSError as e:
        raise Refused(f"cannot listen on {args.address}:{args.port} ({e.strerror or e}): choose another --port "
                      "or --address") from None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print(f"serving metrics on {server.url}", flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        server.collector.close()
    return 0
