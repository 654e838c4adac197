"""Any policy over openpi's websocket protocol, and R2A as a drop-in proxy in front of a VLA server (the command,
``r2a serve`` = ``r2a policy serve``, is :mod:`r2a_cli.serve`).

* :mod:`r2a.serve.policy_server` — :class:`~r2a.serve.policy_server.PolicyServer`: any of our policies over openpi's
  websocket protocol (loopback by default, API key, bounded requests);
* :mod:`r2a.serve.proxy` — :class:`~r2a.serve.proxy.R2AProxyPolicy`: the R2A wrapper around the upstream, in the
  upstream's observation and action format;
* :mod:`r2a.serve.upstream` — :class:`~r2a.serve.upstream.UpstreamPolicy`: the base that forwards the client's
  observation to the upstream server unchanged.
"""
