"""`realm serve`: a trained run's answers over HTTP (`realm.cli.http_app`): POST /ask,
GET /blocks/{id}, GET /health, and a web page at /.

    realm serve --run runs/demo --port 8000 [--workers 2]
"""

from __future__ import annotations

import argparse

from realm.cli.options import add_index_option

# Ports the system is asked for, with --port 0, before giving up on finding one free on every address.
PORT_CHOICES = 8


def add_parser(commands) -> None:
    parser = commands.add_parser("serve", help="answer over HTTP, with a web page (FastAPI)")
    parser.add_argument("--run", required=True, help="run root")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (loopback unless told otherwise)")
    parser.add_argument("--port", type=port_number, default=8000)
    parser.add_argument(
        "--workers", type=worker_count, default=1,
        help="server processes, each with its own copy of the model, splitting the cores between them (at most "
        "one per core; one per core answers the most questions a second, docs/serving.md)",
    )
    parser.add_argument("--device", help="cpu, cuda or cuda:N (default: CUDA when present, else the CPU)")
    parser.add_argument("--bf16-reader", action="store_true",
                        help="run the reader entirely in bf16: less CPU per question, a few answers differ (docs/benchmarks.md)")
    add_index_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from realm.cli.serve_workers import ServeSettings, listen, load_app, serve, serve_in_processes
    from realm.model.networks.device import usable_cores

    cores = usable_cores()
    if args.workers > cores:
        raise SystemExit(f"realm serve: --workers {args.workers} is more than the {cores} cores this process may use")
    # Bound before the model loads: an address that cannot be served is refused at once.
    socket_sets = worker_sockets(args.host, args.port, args.workers)
    port = socket_sets[0][0].getsockname()[1]
    settings = ServeSettings(
        args.run, args.device, args.index, args.bf16_reader, args.workers, cores,
        log_level="info" if args.verbose else "warning",
    )
    serving = f"realm: serving {args.run} on http://{args.host}:{port}/"
    if args.workers > 1:
        return serve_in_processes(
            settings, socket_sets, started=lambda: print(f"{serving} with {args.workers} workers (Ctrl-C stops)", flush=True)
        )
    app = load_app(settings)
    listen(socket_sets[0])
    print(f"{serving} (Ctrl-C stops)", flush=True)
    return 0 if serve(app, socket_sets[0], settings.log_level) else 1


def port_number(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return int(text)


def worker_count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of workers (1 or more)")
    return int(text)


def worker_sockets(host: str, port: int, workers: int) -> list[list]:
    """A set of sockets bound to host:port per worker (`listening_sockets`), every one on the
    same port: for --port 0, the one the system chose for the first."""
    if workers > 1:
        # SO_REUSEPORT would share the port with another server already on it: a plain bind refuses first.
        for probe in listening_sockets(host, port):
            probe.close()
    socket_sets = [listening_sockets(host, port, share_port=workers > 1)]
    port = socket_sets[0][0].getsockname()[1]
    return socket_sets + [listening_sockets(host, port, share_port=True) for _ in range(workers - 1)]


def listening_sockets(host: str, port: int, share_port: bool = False) -> list:
    """Sockets bound to host:port, for the server to listen on: every address the host resolves
    to, as asyncio's `create_server` (uvicorn's) binds them (an address family the machine
    cannot open skipped, IPv6 sockets IPv6-only); `share_port`: with SO_REUSEPORT, so that
    each worker binds its own and the kernel spreads new connections over them. Port 0: the
    port the system chooses for the first address, on every address (where asyncio lets each
    address choose its own, the printed port would reach one of them and the others' listeners
    nobody), another choice taken where that port is in use on another address. SystemExit
    naming the reason when it cannot (a name that does not resolve, an address not on this
    machine, a port taken or privileged)."""
    import errno
    import socket

    for _ in range(PORT_CHOICES):
        opened, chosen = [], port
        try:
            for family, kind, protocol, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
                try:
                    sock = socket.socket(family, kind, protocol)
                except OSError:
                    continue
                opened.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if share_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind((address[0], chosen, *address[2:]))
                chosen = sock.getsockname()[1]
            if not opened:
                raise OSError("no address it resolves to can be opened on this machine")
            return opened
        except OSError as error:  # socket.gaierror included
            for sock in opened:
                sock.close()
            if port == 0 and len(opened) > 1 and error.errno == errno.EADDRINUSE:
                continue  # the port chosen for the first address is another's on this one
            raise SystemExit(f"realm serve: cannot listen on {host}:{port}: {error.strerror or error}") from None
    raise SystemExit(f"realm serve: cannot listen on {host}:{port}: no port is free on all of its addresses")
