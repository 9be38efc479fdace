"""`realm serve`: a trained run's answers over HTTP (`realm.cli.http_app`): POST /ask,
GET /blocks/{id}, GET /health, and a web page at /.

    realm serve --run runs/demo --port 8000
"""

from __future__ import annotations

import argparse

from realm.cli.answering import run_answerer
from realm.cli.options import add_index_option


def add_parser(commands) -> None:
    parser = commands.add_parser("serve", help="answer over HTTP, with a web page (FastAPI)")
    parser.add_argument("--run", required=True, help="run root")
    parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (loopback unless told otherwise)")
    parser.add_argument("--port", type=port_number, default=8000)
    parser.add_argument("--device")
    parser.add_argument("--bf16-reader", action="store_true",
                        help="run the reader entirely in bf16: less CPU per question, a few answers differ (docs/benchmarks.md)")
    add_index_option(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    import torch
    import uvicorn

    from realm.cli.http_app import create_app
    from realm.model.networks.device import usable_cores

    check_can_listen(args.host, args.port)  # before the model loads, not after
    answerer = run_answerer(args.run, args.device, args.index, args.bf16_reader)
    # One worker per core, each forward on one torch thread: a forward split across cores waits
    # at every op for the slowest core, which another process on the machine stalls
    # (docs/serving.md, "How requests are answered"). Set after loading: faiss's thread setting at
    # load is torch's too (one OpenMP).
    torch.set_num_threads(1)
    app = create_app(answerer, args.run, workers=usable_cores())
    print(f"realm: serving {args.run} on http://{args.host}:{args.port}/ (Ctrl-C stops)")
    uvicorn.run(app, host=args.host, port=args.port, log_level="info" if args.verbose else "warning")
    return 0


def port_number(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0-65535)")
    return int(text)


def check_can_listen(host: str, port: int) -> None:
    """SystemExit naming the reason when the server could not listen on host:port (a name that
    does not resolve, an address not on this machine, a port taken or privileged). Binds as
    asyncio's `create_server` (uvicorn's) does: every address the host resolves to, an address
    family the machine cannot open skipped, IPv6 sockets IPv6-only."""
    import socket

    try:
        opened = 0
        for family, kind, protocol, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            try:
                probe = socket.socket(family, kind, protocol)
            except OSError:
                continue
            with probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                probe.bind(address)
                opened += 1
        if not opened:
            raise OSError("no address it resolves to can be opened on this machine")
    except OSError as error:  # socket.gaierror included
        raise SystemExit(f"realm serve: cannot listen on {host}:{port}: {error.strerror or error}") from None
