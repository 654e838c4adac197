"""``r2a serve``: serve any policy with openpi's websocket protocol, or R2A as a drop-in proxy in front of a VLA server.

  r2a serve --policy SPEC [--host 127.0.0.1] [--port 8000] [--api-key KEY] [--max-message-mb 8]
  r2a serve --policy r2a:CONFIG --upstream ws://HOST:PORT [--keymap ADAPTER.yaml] [--upstream-api-key KEY]

The first form serves SPEC (``r2a policy serve`` is the same command). With ``--upstream`` the robot client
talks to r2a exactly as it talked to the VLA server: each observation is forwarded upstream unchanged, the
reply blended by R2A, the answer given in the VLA's action format (r2a/serve/proxy.py). The proxy waits up to
``--upstream-wait`` seconds for the upstream at start and exits 2 if it does not answer; later, an upstream that
is down, fails or replies with something unusable gives the client a one-line ``upstream error: …`` text frame,
its connection stays open, and the next request reconnects (retrying for ``--upstream-retry`` seconds).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

log = logging.getLogger(__name__)

#: environment variable holding the upstream server's API key (``--upstream-api-key`` overrides it)
UPSTREAM_API_KEY_ENV = "R2A_UPSTREAM_API_KEY"


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``r2a serve`` (and of its alias ``r2a policy serve``)."""
    parser.add_argument("--policy", default=None,
                        help="policy spec to serve (default: builtin; with --upstream: r2a), e.g. builtin:DIR, "
                             "r2a:configs/r2a/builtin.yaml, r2a:FIT_DIR, r2a-builtin")
    parser.add_argument("--host", default="127.0.0.1",
                        help="interface to listen on (default: loopback only; 0.0.0.0 serves every interface and "
                             "is logged as a warning — set an API key then)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key", metavar="KEY",
                        help="require openpi's 'Authorization: Api-Key KEY' header (default: $R2A_POLICY_API_KEY; "
                             "the variable keeps the key out of the process list)")
    parser.add_argument("--max-message-mb", type=float, default=8.0, metavar="MB",
                        help="largest request accepted, in MiB (default: 8)")
    proxy = parser.add_argument_group("proxy (R2A in front of a running VLA server)")
    proxy.add_argument("--upstream", metavar="ws://HOST:PORT",
                       help="the VLA's openpi-protocol server: clients talk to r2a as they talked to it")
    proxy.add_argument("--keymap", metavar="ADAPTER.yaml",
                       help="adapter YAML describing the upstream's format (configs/adapters/, a bare name like "
                            "openpi_libero works; default: r2a's own keys); its url: is the default --upstream")
    proxy.add_argument("--upstream-api-key", metavar="KEY",
                       help=f"API key the upstream requires (default: ${UPSTREAM_API_KEY_ENV}, else the "
                            "adapter's api_key_env)")
    proxy.add_argument("--upstream-timeout", type=float, default=None, metavar="S",
                       help="seconds to wait for one upstream reply (default: the adapter's timeout:, else 60)")
    proxy.add_argument("--upstream-wait", type=float, default=30.0, metavar="S",
                       help="seconds to wait for the upstream at start, which may still be loading (default: 30)")
    proxy.add_argument("--upstream-retry", type=float, default=2.0, metavar="S",
                       help="at a request, seconds to retry a lost upstream (every 0.5 s) before answering the "
                            "client with an error (default: 2)")


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_serve_arguments(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    return serve(args)


def serve(args: argparse.Namespace) -> int:
    """Build the server the options describe and serve until Ctrl-C (or SIGTERM)."""
    build_server(args).serve_forever()
    return 0


def build_server(args: argparse.Namespace) -> Any:
    """The :class:`~r2a.serve.policy_server.PolicyServer` of ``r2a serve`` / ``r2a policy serve`` (not started)."""
    from eval.diagnostics import register_diagnostics
    from r2a.serve.policy_server import API_KEY_ENV, PolicyServer, ServerLimits
    from r2a_core.errors import R2AInputError

    if not args.max_message_mb > 0:
        raise R2AInputError(f"--max-message-mb must be positive, got {args.max_message_mb}")
    register_diagnostics()  # the earlier variants and ablations serve under their names (experts and oracles refuse)
    limits = ServerLimits(max_message_bytes=int(args.max_message_mb * 2**20))
    if getattr(args, "upstream", None) or getattr(args, "keymap", None):
        policy: Any = _proxy(args)
        metadata = policy.metadata
    else:
        from r2a.policies.registry import make_policy

        spec = args.policy or "builtin"
        policy = make_policy(spec, sim=None, seed=0)
        metadata = dict(getattr(policy, "metadata", None) or {"policy": spec})
    log.info("%s loaded; opening the server on %s:%d", args.policy or "builtin", args.host, args.port)
    return PolicyServer(policy, host=args.host, port=args.port, metadata=metadata,
                        api_key=args.api_key or os.environ.get(API_KEY_ENV), limits=limits)


def _proxy(args: argparse.Namespace) -> Any:
    from r2a.adapters.keymap import ADAPTER_DIR, adapter_yaml, load_adapter_config
    from r2a.serve.proxy import build_proxy
    from r2a_core.errors import R2AInputError

    adapter = None
    if args.keymap:
        path = adapter_yaml(args.keymap)
        if not path.is_file():
            raise R2AInputError(f"--keymap {args.keymap}: no such adapter YAML (the shipped ones are in {ADAPTER_DIR})")
        adapter = load_adapter_config(path)
    url = args.upstream or (adapter.url if adapter else None)
    if not url:
        raise R2AInputError(f"--keymap {args.keymap}: the adapter has no url:; give --upstream ws://HOST:PORT")
    api_key = args.upstream_api_key or os.environ.get(UPSTREAM_API_KEY_ENV)
    if not api_key and adapter is not None and adapter.api_key_env:
        api_key = os.environ.get(adapter.api_key_env)
        if not api_key:
            raise R2AInputError(f"{adapter.path}: api_key_env names ${adapter.api_key_env}, which is not set")
    for name in ("upstream_wait", "upstream_retry", "upstream_timeout"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise R2AInputError(f"--{name.replace('_', '-')} must be positive, got {value}")
    timeout = args.upstream_timeout or (adapter.timeout if adapter and adapter.timeout else 60.0)
    return build_proxy(args.policy or "r2a", url, adapter.keymap if adapter else None, api_key=api_key,
                       timeout=timeout, connect_timeout=args.upstream_wait, reconnect_timeout=args.upstream_retry)


if __name__ == "__main__":
    sys.exit(run(build_parser("r2a serve").parse_args()))
