"""The console's own static files (`static/`, shipped in the wheel): its stylesheet and its live-view script.

Served by name from a fixed list read once from the package, never from a path the request names, with the
console's security headers and a short cache (a new console version's files are fetched within a minute).
"""

from __future__ import annotations

import functools
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response

FILES = {"console.css": "text/css; charset=utf-8", "live.js": "text/javascript; charset=utf-8"}
HEADERS = {"Cache-Control": "max-age=60", "X-Content-Type-Options": "nosniff"}


@functools.cache
def read(name: str) -> bytes:
    """One of FILES, as shipped."""
    return (resources.files("jobfence_ops.console") / "static" / name).read_bytes()


def serve(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in FILES:
        return Response(f"no static file {name}"[:120], 404, media_type="text/plain", headers=HEADERS)
    return Response(read(name), media_type=FILES[name], headers=HEADERS)
