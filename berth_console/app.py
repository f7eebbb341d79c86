"""The console's HTTP side: pages, their live streams, static files, probes and actions.

Every GET page is a view (``pages/``) rendered whole; ``/stream/<page>`` keeps the same view
live (``live.py``). POSTs are actions: refused (403) unless the request carries the token the
operator configured (``BERTH_CONSOLE_TOKEN``), compared in constant time, from this origin.
"""

from __future__ import annotations

import asyncio
import hmac
import re
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from berth_console.actions import QUEUE_NOTICES, queue_action
from berth_console.live import FINGERPRINT, fingerprint, stream
from berth_console.markup import Markup, render
from berth_console.pages.base import Context, View
from berth_console.pages.cluster_queue import ClusterQueueView
from berth_console.pages.events import EventsView
from berth_console.pages.jobs import JobsView, JobView
from berth_console.pages.layout import page
from berth_console.pages.overview import OverviewView
from berth_console.pages.workload import WorkloadView
from berth_console.pages.workloads import WorkloadsView
from berth_console.queries import QueryError
from shared.logging import get_logger
from shared.queue_stop import QueueNotFound

__all__ = ["CONTEXT", "build_app", "make_view"]

log = get_logger("console.http")
STATIC = Path(__file__).resolve().parent / "static"
CONTEXT = web.AppKey("context", Context)
TOKEN = web.AppKey("token", str)  # "" when actions are off
STOPPING = web.AppKey("stopping", asyncio.Event)

# No inline script or style anywhere, so the policy can forbid both.
_CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
_NOTICES = {  # ?notice= values a redirect may carry; never text from the request itself
    "cancel-requested": ("ok", "Cancel requested: recovery is stopping the job."),
    **QUEUE_NOTICES,
}
_ROUTES: list[tuple[re.Pattern[str], Callable[..., View]]] = []


def _route(pattern: str) -> Callable[[Callable[..., View]], Callable[..., View]]:
    def register(factory: Callable[..., View]) -> Callable[..., View]:
        _ROUTES.append((re.compile(pattern), factory))
        return factory

    return register


@_route(r"/")
def _overview(context: Context, query: Mapping[str, str]) -> View:
    return OverviewView(context)


@_route(r"/cq/(?P<name>[^/]+)")
def _cluster_queue(context: Context, query: Mapping[str, str], name: str) -> View:
    return ClusterQueueView(context, name)


@_route(r"/workloads")
def _workloads(context: Context, query: Mapping[str, str]) -> View:
    return WorkloadsView(
        context,
        namespace=query.get("namespace", ""),
        queue=query.get("queue", ""),
        status=query.get("status", ""),
    )


@_route(r"/workloads/(?P<namespace>[^/]+)/(?P<name>[^/]+)")
def _workload(context: Context, query: Mapping[str, str], namespace: str, name: str) -> View:
    return WorkloadView(context, namespace, name)


@_route(r"/jobs")
def _jobs(context: Context, query: Mapping[str, str]) -> View:
    return JobsView(context)


@_route(r"/jobs/(?P<job_id>\d{1,12})")
def _job(context: Context, query: Mapping[str, str], job_id: str) -> View:
    return JobView(context, int(job_id))


@_route(r"/events")
def _events(context: Context, query: Mapping[str, str]) -> View:
    return EventsView(
        context, namespace=query.get("namespace", ""), cluster_queue=query.get("cq", "")
    )


def make_view(context: Context, path: str, query: Mapping[str, str]) -> View | None:
    """The view of a page path (decoded), or None if there is no such page."""
    for pattern, factory in _ROUTES:
        match = pattern.fullmatch(path)
        if match is not None:
            return factory(context, query, **match.groupdict())
    return None


def _html(body: Markup, *, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/html", charset="utf-8")


def _problem(status: int, title: str, message: str, *, back: str = "/") -> web.Response:
    body = render(
        '<h1>$title</h1><p>$message</p><p><a href="$back">Back</a></p>',
        title=title,
        message=message,
        back=back,
    )
    return _html(page(title=title, nav="", body=body, stream=""), status=status)


async def _page(request: web.Request) -> web.StreamResponse:
    view = make_view(request.app[CONTEXT], request.path, request.query)
    if view is None:
        return _problem(404, "Not found", f"There is no page at {request.path}.")
    notice = Markup("")
    if request.query.get("notice") in _NOTICES:
        kind, text = _NOTICES[request.query["notice"]]
        notice = render('<p class="notice $kind" role="status">$text</p>', kind=kind, text=text)
    snapshot = await view.current()
    query = {k: v for k, v in request.query.items() if k not in (FINGERPRINT, "notice")}
    query[FINGERPRINT] = fingerprint(snapshot)
    return _html(
        page(
            title=view.title,
            nav=view.nav,
            body=view.body(snapshot),
            stream=f"/stream{request.rel_url.raw_path}?{urlencode(query)}",
            notice=notice,
        )
    )


async def _stream(request: web.Request) -> web.StreamResponse:
    path = "/" + request.match_info["path"]
    view = make_view(request.app[CONTEXT], path, request.query)
    if view is None:
        raise web.HTTPNotFound()
    return await stream(request, view, request.app[STOPPING])


def _refusal(request: web.Request, token: str) -> str | None:
    """Why an action is refused, or None if the operator's token came with it."""
    configured = request.app[TOKEN]
    if not configured:
        return "This console is read-only: it was started without BERTH_CONSOLE_TOKEN."
    origin = request.headers.get("Origin")
    # The host only: behind a TLS proxy the browser's scheme is not the one seen here.
    if origin is not None and urlsplit(origin).netloc != request.host:
        return "An action must come from the console's own pages."
    header = request.headers.get("Authorization", "")
    given = token or header.removeprefix("Bearer ").strip()
    if not given or not hmac.compare_digest(given.encode(), configured.encode()):
        return "The operator token is missing or wrong."
    return None


def _action(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def guarded(request: web.Request) -> web.StreamResponse:
        form = await request.post()
        token = form.get("token")
        refusal = _refusal(request, token if isinstance(token, str) else "")
        if refusal is not None:
            log.warning("action_refused", path=request.path, reason=refusal)
            return _problem(403, "Refused", refusal, back=request.path.rsplit("/", 1)[0])
        return await handler(request)

    return guarded


@_action
async def _cancel(request: web.Request) -> web.StreamResponse:
    job_id = int(request.match_info["job_id"])
    queries = request.app[CONTEXT].queries
    if queries is None:
        return _problem(503, "Not connected", "The console has no bus connection.")
    try:
        await queries.cancel(job_id)
    except QueryError as error:
        return _problem(409, "Not cancelled", str(error), back=f"/jobs/{job_id}")
    log.info("job_cancel_requested", job_id=job_id)
    raise web.HTTPSeeOther(f"/jobs/{job_id}?notice=cancel-requested")


@_action
async def _stop_queue(request: web.Request) -> web.StreamResponse:
    """Stop or resume a ClusterQueue (``/cq/<name>/<verb>``) or a LocalQueue
    (``/lq/<namespace>/<name>/<verb>``) with the CLI's rule (berth_console/actions.py)."""
    info = request.match_info
    kind = "LocalQueue" if "namespace" in info else "ClusterQueue"
    action = queue_action(
        kind, info["name"], info.get("namespace", ""), info["verb"], await request.post()
    )
    context = request.app[CONTEXT]
    back = action.back(context.model)
    if context.queries is None:
        return _problem(503, "Not connected", "The console has no bus connection.", back=back)
    try:
        outcome = await context.queries.set_stop_policy(
            action.kind, action.name, action.namespace, action.policy
        )
    except QueueNotFound as error:
        return _problem(404, "Not found", f"{error}.", back=back)
    except QueryError as error:
        return _problem(409, "Not changed", str(error), back=back)
    log.info(
        "queue_stop_policy",
        queue=action.where,
        kind=action.kind,
        policy=action.policy,
        changed=outcome.changed,
        reason="operator action in the console",
    )
    raise web.HTTPSeeOther(f"{back}?notice={action.notice(outcome)}")


async def _healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _metrics(_: web.Request) -> web.Response:
    """Prometheus text, like every service's (the process and the fence's counters)."""
    return web.Response(
        body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


async def _readyz(request: web.Request) -> web.Response:
    context = request.app[CONTEXT]
    connected = context.queries is not None and context.queries.bus.nc.is_connected
    if context.model.caught_up and connected:
        return web.Response(text="ready")
    return web.Response(status=503, text="not ready")


@web.middleware
async def _headers(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    response = await handler(request)
    if not response.prepared:  # a stream sent its headers already
        response.headers.setdefault("Content-Security-Policy", _CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "same-origin")
    return response


def build_app(context: Context, *, token: str | None, stopping: asyncio.Event) -> web.Application:
    app = web.Application(middlewares=[_headers])
    app[CONTEXT] = context
    app[TOKEN] = token or ""
    app[STOPPING] = stopping
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.router.add_get("/metrics", _metrics)
    app.router.add_static("/static/", STATIC)
    app.router.add_get("/stream/{path:.*}", _stream)
    app.router.add_post(r"/jobs/{job_id:\d{1,12}}/cancel", _cancel)
    app.router.add_post("/cq/{name}/{verb:stop|resume}", _stop_queue)
    app.router.add_post("/lq/{namespace}/{name}/{verb:stop|resume}", _stop_queue)
    app.router.add_get("/{path:.*}", _page)
    app.on_shutdown.append(_end_streams)
    return app


async def _end_streams(app: web.Application) -> None:
    """Before the server waits for its handlers: every live stream returns now."""
    app[STOPPING].set()
    app[CONTEXT].model.changes.close()
