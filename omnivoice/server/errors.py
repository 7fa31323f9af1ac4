"""Errors in OpenAI's JSON shape, for every failure the server answers, and never a traceback.

    {"error": {"message": "...", "type": "invalid_request_error", "param": "speed", "code": "invalid_value"}}

`APIError` is raised by the routes; `install(app)` turns it, validation errors (a missing, unknown or
out-of-range field: 400), Starlette's HTTP errors (unknown route 404, wrong method 405) and any other
exception (500, logged with its traceback on the server only) into that shape. `error_response` builds
the same body for the ASGI middlewares, which answer before FastAPI sees the request.
"""

from __future__ import annotations

import json
import logging
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, Response

log = logging.getLogger("omnivoice.server")

__all__ = ["APIError", "error_body", "error_response", "install", "validation_error"]


CLIENT_GONE = 499  # nginx's "client closed request": counted in the metrics, never seen by the client


def _type_for(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status >= 500:
        return "server_error"
    return "invalid_request_error"


class APIError(Exception):
    """An answer other than success: HTTP status, message, and OpenAI's type / code / param fields."""

    def __init__(self, status: int, message: str, code: Optional[str] = None, param: Optional[str] = None,
                 type: Optional[str] = None, headers: Optional[dict] = None) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.type = type or _type_for(status)
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        return JSONResponse(error_body(self.message, self.type, self.code, self.param), self.status,
                            headers=self.headers)


def parse_json(data, what: str):
    """`data` (bytes or str) parsed as JSON, else a 400 naming `what` ("the request body"). Nesting deeper than
    the interpreter's recursion limit is one of them: json's decoder raises RecursionError there (a 500 before)."""
    try:
        return json.loads(data)
    except ValueError as e:
        raise APIError(400, f"{what} is not valid JSON ({e})", "invalid_json") from None
    except RecursionError:
        raise APIError(400, f"{what} is JSON nested too deeply", "invalid_json") from None


def error_body(message: str, type: str, code: Optional[str] = None, param: Optional[str] = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_response(status: int, message: str, code: Optional[str] = None,
                   headers: Optional[dict] = None) -> tuple[dict, bytes]:
    """(http.response.start message, body) for raw ASGI senders."""
    body = json.dumps(error_body(message, _type_for(status), code)).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), str(v).encode()) for k, v in (headers or {}).items()]
    return {"type": "http.response.start", "status": status, "headers": raw}, body


def _validation_message(exc: RequestValidationError) -> tuple[str, Optional[str], str]:
    """(message, param, code) of the first problem FastAPI found in a request."""
    errors = exc.errors()
    if not errors:
        return "invalid request", None, "invalid_request"
    e = errors[0]
    loc = [str(x) for x in e.get("loc", ()) if x not in ("body", "query", "path", "header", "form")]
    param = ".".join(loc) or None
    kind = e.get("type", "")
    if kind == "missing":
        return f"missing required parameter {param!r}", param, "missing_required_parameter"
    if kind == "extra_forbidden":
        return f"unrecognized request argument supplied: {param}", param, "unknown_parameter"
    given = f" (got {e['input']!r})" if "input" in e and not isinstance(e["input"], (dict, list)) else ""
    return (f"{param}: {e.get('msg', 'invalid value')}{given}" if param else e.get("msg", "invalid request"),
            param, "invalid_value")


def validation_error(exc) -> APIError:
    """The 400 for a RequestValidationError or a pydantic ValidationError: its first problem."""
    message, param, code = _validation_message(exc)
    return APIError(400, message, code, param)


def install(app: FastAPI) -> None:
    """Answer every error of `app` in OpenAI's shape."""

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        return validation_error(exc).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 404:
            message = f"no such endpoint: {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return APIError(exc.status_code, message, "not_found" if exc.status_code == 404 else None,
                        headers=dict(exc.headers or {})).response()

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect):
        # the client left (or its body stalled past --body-timeout) before its request was read: nobody to answer
        log.info("client went away before its request was in: %s %s", request.method, request.url.path)
        return Response(status_code=CLIENT_GONE)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return APIError(500, f"internal server error ({type(exc).__name__}); see the server log",
                        "internal_error").response()
