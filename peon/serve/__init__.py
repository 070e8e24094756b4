"""``peon serve``: one workspace's Peon session as an MCP Streamable HTTP server (the tool daemon inside a
sandbox, a pod or a container).

:mod:`peon.serve.options` (the command line) is light; everything else needs the ``serve`` extra
(Starlette, uvicorn, prometheus_client) and is imported only by ``peon serve`` itself, never by
``peon mcp``. The sans-I/O parts — :mod:`~peon.serve.guard`, :mod:`~peon.serve.wire`,
:mod:`~peon.serve.idempotency` — decide; :mod:`~peon.serve.calls` routes calls between HTTP requests and
the session, keeping them in the call book of :mod:`peon.mcp.calls` (shared with ``peon mcp``);
:mod:`~peon.serve.app` is the ASGI application; :mod:`~peon.serve.main` runs it. See ``docs/deploy.md``.
"""
