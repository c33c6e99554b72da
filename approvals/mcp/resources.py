"""Plans as MCP resources (``countersign://plans/{plan_id}``) and how a client hears that
one changed, without polling:

* **2026-07-28** (HTTP and stdio): ``subscriptions/listen`` with the plan URIs in
  ``resourceSubscriptions``; the SDK's :class:`~mcp.server.subscriptions.ListenHandler`
  serves the stream (acknowledgement first, every frame tagged with the subscription
  id) and sends ``notifications/resources/updated`` for each plan that changes.
* **The initialize handshake** (stdio): ``resources/subscribe`` and ``unsubscribe``;
  the notification goes to the connection. Stateless HTTP has no connection to carry it
  in that era, so there the capability is not advertised (``subscribe: false``).

A change is heard through :mod:`approvals.wakeups` — the Redis message every process
that moves a plan publishes on commit (a reviewer's web process, a worker, the sweeper)
— so the process holding the stream learns of a change made anywhere. Only the agent's
own plans are honoured; other URIs are left out of the acknowledgement.

The agent is checked again before every notification, and a stream or a connection's
subscriptions end once the agent is revoked or deactivated (within
``COUNTERSIGN_AGENT_CHECK_SECONDS``): a listen stream with the unauthenticated error
(approvals.mcp.protocol.agent_cutoff), stdio subscriptions by being dropped (the
connection's requests are refused from then on, as for any bad token).
"""

from __future__ import annotations

import contextvars
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import mcp.types as types
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError

from actions.models import Agent

from ..models import Plan, PlanStatus
from ..wakeups import AgentGone, AgentLease, agent_watcher, db_call, wait_for_change
from .rendering import PLAN_URI, plan_document, plan_markdown

log = logging.getLogger(__name__)

_PLAN_PREFIX = "countersign://plans/"
# Plans listed by resources/list: the agent's newest not yet settled ones.
LISTED_PLANS = 50
# Plans one stream (or one stdio connection) may follow at once.
MAX_FOLLOWED = 100
# Streams one process serves at once.
MAX_STREAMS = 1024
# How long one wait for a change lasts before the status is read again (a safety net:
# the wake-up normally comes first).
WATCH_SECONDS = 30.0

# The lease on the agent of the request being served (approvals.mcp.protocol.agent_cutoff
# sets it), so what a handler starts can check the agent before each notification.
held_lease: contextvars.ContextVar[AgentLease | None] = contextvars.ContextVar(
    "countersign_mcp_lease", default=None
)


def plan_uri(plan_id: Any) -> str:
    return PLAN_URI.format(plan_id=plan_id)


def plan_id_from_uri(uri: str) -> uuid.UUID | None:
    if not uri.startswith(_PLAN_PREFIX):
        return None
    try:
        return uuid.UUID(uri[len(_PLAN_PREFIX) :])
    except ValueError:
        return None


def plan_template() -> types.ResourceTemplate:
    return types.ResourceTemplate(
        uri_template=PLAN_URI,
        name="plan",
        title="A plan you proposed",
        description=(
            "One of your plans: its status, preview and outcome (markdown, and the JSON "
            "document GET /api/v1/plans/{id} returns). Subscribe to hear when it changes."
        ),
        mime_type="application/json",
    )


def plan_resources(agent: Agent) -> list[types.Resource]:
    """The agent's newest plans that are not settled yet (they are the ones to follow)."""
    plans = Plan.objects.select_related("action").filter(
        agent=agent, status__in=PlanStatus.in_flight()
    )[:LISTED_PLANS]
    return [
        types.Resource(
            uri=plan_uri(plan.id),
            name=f"plan {plan.short_code}",
            title=f"Plan {plan.short_code}: {plan.action.title}",
            description=f"{plan.action.name}, {plan.status}",
            mime_type="application/json",
        )
        for plan in plans
    ]


def plan_contents(plan: Plan) -> types.ReadResourceResult:
    """The plan as markdown for the model and a person, and as the API's JSON document."""
    doc = plan_document(plan)
    uri = plan_uri(plan.id)
    return types.ReadResourceResult(
        contents=[
            types.TextResourceContents(
                uri=uri, mime_type="text/markdown", text=plan_markdown(plan, doc, proposed=False)
            ),
            types.TextResourceContents(uri=uri, mime_type="application/json", text=_json_text(doc)),
        ]
    )


def _json_text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, sort_keys=True)


def owned_plan_ids(agent: Agent, uris: list[str]) -> list[uuid.UUID]:
    """The plans among ``uris`` that are the agent's (at most MAX_FOLLOWED)."""
    wanted = [pid for pid in (plan_id_from_uri(u) for u in uris[:MAX_FOLLOWED]) if pid]
    if not wanted:
        return []
    owned = set(Plan.objects.filter(agent=agent, id__in=wanted).values_list("id", flat=True))
    return [pid for pid in dict.fromkeys(wanted) if pid in owned]


def _status(plan_id: uuid.UUID) -> str | None:
    return Plan.objects.filter(id=plan_id).values_list("status", flat=True).first()


async def watch_plan(
    plan_id: uuid.UUID,
    changed: Callable[[], Awaitable[None]],
    lease: AgentLease | None = None,
) -> None:
    """Call ``changed`` each time the plan's status changes, until it is terminal.

    Each change is announced at least once (a level trigger: the client reads the plan
    again); two changes close together may be announced once. With a ``lease``, the
    agent is checked before each announcement, and the watch ends when it is cut
    (:class:`~approvals.wakeups.AgentGone`).
    """
    read = db_call(_status)

    async def status() -> str | None:
        return await read(plan_id)

    last = await status()
    while last is not None and last not in PlanStatus.terminal():
        # Registered before it reads, so a change committed meanwhile is not missed.
        first = await wait_for_change(plan_id, read=status, timeout=WATCH_SECONDS, lease=lease)
        current = first if first != last else await status()
        if current is None:
            return
        if current != last:
            last = current
            if lease is not None:
                await lease.confirm()
            await changed()


# --- 2026-07-28: subscriptions/listen ------------------------------------------------------


class PlanListen:
    """``subscriptions/listen`` for the agent's plans: the SDK's ListenHandler on a bus of
    its own, fed by one watcher per followed plan for as long as the stream is open."""

    def __init__(self, authenticate: Callable[[ServerRequestContext[Any, Any]], Awaitable[Agent]]):
        self._authenticate = authenticate
        self._streams = 0

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        agent = await self._authenticate(ctx)
        requested = list(params.notifications.resource_subscriptions or [])
        followed = await db_call(owned_plan_ids)(agent, requested)
        # Only plan updates are sent: no list_changed of any kind (listChanged is false).
        honored = params.notifications.model_copy(
            update={
                "resource_subscriptions": [plan_uri(p) for p in followed] or None,
                "tools_list_changed": None,
                "prompts_list_changed": None,
                "resources_list_changed": None,
            }
        )
        params = params.model_copy(update={"notifications": honored})
        if self._streams >= MAX_STREAMS:
            # The SDK's wording for its own limit, before any acknowledgement.
            raise MCPError(types.INTERNAL_ERROR, "Subscription limit reached")
        bus = InMemorySubscriptionBus()
        self._streams += 1
        try:
            async with anyio.create_task_group() as tg:
                lease = held_lease.get()
                for plan_id in followed:
                    publish = _publisher(bus, plan_uri(plan_id))
                    tg.start_soon(_watch_quietly, plan_id, publish, lease)
                try:
                    return await ListenHandler(bus, max_subscriptions=1)(ctx, params)
                finally:
                    tg.cancel_scope.cancel()
        finally:
            self._streams -= 1


async def _watch_quietly(plan_id, changed, lease: AgentLease | None) -> None:
    """watch_plan for a stream: a cut-off agent ends the watch (the lease being cut
    ends the stream itself)."""
    try:
        await watch_plan(plan_id, changed, lease)
    except AgentGone:
        pass


def _publisher(bus: InMemorySubscriptionBus, uri: str) -> Callable[[], Awaitable[None]]:
    async def publish() -> None:
        await bus.publish(ResourceUpdated(uri=uri))

    return publish


# --- the initialize handshake: resources/subscribe (stdio) ----------------------------------


class ConnectionSubscriptions:
    """``resources/subscribe`` on a connection that lasts (stdio), for the agent holding
    ``token``: one watcher per subscribed plan, in the connection's task group,
    notifying through the session.

    While any subscription is open the connection holds a lease on its agent: once the
    agent is revoked or deactivated every subscription is dropped (within
    ``COUNTERSIGN_AGENT_CHECK_SECONDS``), and the agent is checked again before each
    notification. A new subscription needs the agent usable again."""

    def __init__(self, task_group: anyio.abc.TaskGroup, token: str) -> None:
        self._tg = task_group
        self._token = token
        self._watching: dict[str, anyio.CancelScope] = {}
        self._lease: AgentLease | None = None
        self._stop_lease: Callable[[], None] | None = None

    def subscribe(self, uri: str, plan_id: uuid.UUID, session: Any) -> None:
        if uri in self._watching:
            return
        if len(self._watching) >= MAX_FOLLOWED:
            raise ValueError(f"at most {MAX_FOLLOWED} subscriptions at once")
        lease = self._held()
        scope = anyio.CancelScope()
        self._watching[uri] = scope

        async def notify() -> None:
            await session.send_resource_updated(uri)

        async def run() -> None:
            with scope:
                try:
                    await watch_plan(plan_id, notify, lease)
                except AgentGone:
                    pass  # every subscription is being dropped (_cut_off)
                except Exception:  # noqa: BLE001 - a lost connection ends the watch
                    log.debug("stopped watching %s", uri, exc_info=True)
            if self._watching.get(uri) is scope:
                del self._watching[uri]
            self._release_if_idle()

        self._tg.start_soon(run)

    def unsubscribe(self, uri: str) -> None:
        scope = self._watching.pop(uri, None)
        if scope is not None:
            scope.cancel()
        self._release_if_idle()

    def _held(self) -> AgentLease:
        if self._lease is None:
            self._lease = agent_watcher().register(self._token)
            self._stop_lease = self._lease.on_cut(self._cut_off)
        return self._lease

    def _release_if_idle(self) -> None:
        if self._watching or self._lease is None:
            return
        lease, stop, self._lease, self._stop_lease = self._lease, self._stop_lease, None, None
        if stop is not None:
            stop()
        lease.release()

    def _cut_off(self) -> None:
        """The agent was revoked or deactivated: drop every subscription."""
        dropped = list(self._watching.values())
        self._watching.clear()
        for scope in dropped:
            scope.cancel()
        log.warning(
            "the agent's token no longer authenticates (revoked, deactivated or expired): "
            "%d subscription(s) dropped",
            len(dropped),
        )
        lease, self._lease, self._stop_lease = self._lease, None, None
        if lease is not None:
            lease.release()
