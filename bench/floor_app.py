"""The floor for extender benchmarks: the same stack (uvicorn + httptools + orjson) doing
nothing but parsing the filter body and echoing the offered names back.

    python bench/floor_app.py --port 18888
"""

from __future__ import annotations

import argparse

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


async def echo(request: Request) -> Response:
    args = orjson.loads(await request.body())
    names = args.get("NodeNames") or [n["metadata"]["name"] for n in args["Nodes"]["items"]]
    answer: dict[str, object] = {
        "NodeNames": names,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    return Response(orjson.dumps(answer), media_type="application/json")


async def ready(_request: Request) -> Response:
    return Response(b'{"status":"ready"}', media_type="application/json")


app = Starlette(routes=[Route("/filter", echo, methods=["POST"]), Route("/readyz", ready)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        http="httptools",
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
