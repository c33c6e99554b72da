"""What every connector kind does: the one interface preview, revalidation, execution,
verification and reconciliation speak to an upstream through.

This is the guide a new kind follows (the HTTP kind, ``actions/connectors/http/``, is the
first; an MCP server's is next). A kind is a class deriving from ``ConnectorKind``,
registered by name in ``actions/connectors/registry.py`` under a dotted path, the way
Django loads a database backend: nothing in the core imports a kind, and no kind imports
another. The core asks a kind's ``features`` ("can it fence a write?", "does it keep an
idempotency key?"), never which kind it is.

The five things a kind does, and the guarantee each one carries:

1. **Read a target** (``reader``, ``read``): give ``before``, its version and how strong
   that version is (``Read``). Reading uses the connector's *read* credential only, and a
   reader must refuse anything that could change the upstream before it leaves the
   process: preview, revalidation, verification and reconciliation all read through it.
   The same function serves the preview and the worker's re-read, so the version checked
   before writing is computed exactly as the one the reviewer approved.
   Problems are raised as ``PreviewError`` (or a subclass), with text Countersign wrote:
   an upstream's own words never reach an agent.
2. **Plan the write** (``precondition``, ``write_request``, ``read_request``): the exact
   request the reviewer sees and the worker sends, with the fence the kind can carry (a
   version the upstream checks) or, where it can carry none, ``enforced_by: "reread"``
   and the worker's re-read alone. What is shown is what is sent.
3. **Send the one write** (``authenticate``, ``writer``): the worker opens the write
   credential from the vault and hands the opened secret to ``authenticate``; a kind
   never opens a credential itself. ``Writer.recorded`` says what will be recorded
   before anything leaves (credentials by name only, never by value); ``Writer.send``
   sends once, carrying the attempt's idempotency key where the action declares the
   upstream honours one, and raises ``UpstreamError`` with ``sent`` saying whether
   anything may have reached the upstream. The worker commits the attempt and its key
   before calling ``send`` and never holds a transaction open across it.
4. **Classify what came back** (``classify``, ``read_refusal``, ``notes``): map an
   answer to one of the outcome states (``Outcome``) with a short reason an agent may
   read, say whether it may be sent again with the same key (``Resend``; the worker
   decides how many times), whether the fence refused it (the worker re-reads to tell
   "changed" from "refused"), and whether the upstream refused the credential.
5. **Read back and reconcile** (``read`` again, ``read_status``, ``status_path``): after
   a success the worker re-reads the target and compares it with ``after``; an unknown
   outcome is settled by the same read-back, by the action's status request, or, where
   the upstream keeps idempotency keys, by the same write with the same key.

An answer (``Answer``) is what the kind's transport returned, already scrubbed of every
credential this process holds: the core records its status, headers, body and timing,
and projects the action's declared result fields from it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from actions.lib.exceptions import CountersignError


class PreviewError(CountersignError):
    """The preview could not be computed; nothing was stored."""

    status = 502
    type = "upstream-read-failed"
    title = "The upstream could not be read"


class TargetNotFound(PreviewError):
    status = 404
    type = "target-not-found"
    title = "The target does not exist"


class TargetExists(PreviewError):
    status = 409
    type = "target-exists"
    title = "The target already exists"


class UpstreamEchoesSecrets(PreviewError):
    """The upstream's answer repeated a credential Countersign sent or holds. The plan is
    refused rather than shown redacted: nobody should approve a change computed from a
    read the upstream poisoned."""

    status = 502
    type = "upstream-echoes-secrets"
    title = "The upstream is echoing credentials"


class UpstreamTimeout(PreviewError):
    status = 504
    type = "upstream-timeout"
    title = "The upstream did not answer in time"


class Outcome:
    """The outcome states a kind classifies an answer into (the plan's states of the same
    names; the core turns them into ``approvals.models.PlanStatus``)."""

    COMPLETED = "completed"
    PENDING = "pending"
    ALREADY_IN_DESIRED_STATE = "already_in_desired_state"
    REJECTED = "rejected"
    STALE = "stale"
    UNKNOWN = "unknown"


# How much a version says (``Read.strength``): a strong one changes whenever the target
# does and may fence a write; a weak one may stay the same across a change of bytes, so
# only the worker's own comparison of the re-read can use it.
STRONG = "strong"
WEAK = "weak"


@dataclass(frozen=True)
class Features:
    """What a kind can do, as flags the core asks (Django's ``BaseDatabaseFeatures``)."""

    # The upstream itself can refuse a write whose target changed since it was read (a
    # conditional write), so the window between re-read and write is closed upstream.
    can_fence_writes: bool = False
    # A write may carry an idempotency key the upstream keeps, so a write whose answer
    # was lost may be sent again with the same key and acted on once.
    can_key_writes: bool = False
    # Accepted work (``Outcome.PENDING``) can be followed with a status request.
    can_follow_accepted_work: bool = False
    # The upstream may take no credential at all (a local MCP server): a connector with
    # no write credential still writes, with nothing opened (``authenticate(None, {})``);
    # what keeps the preview side from writing is then its reader alone.
    write_credential_optional: bool = False


@dataclass
class Read:
    """A target as read: whether it exists, its representation and its version."""

    exists: bool
    body: Any
    version: Any
    status: int | None = None
    strength: str | None = None  # STRONG, WEAK, or None when the action keeps no version


@dataclass(frozen=True)
class Resend:
    """The answer may be sent again with the same idempotency key: ``after`` the seconds
    the upstream asked to wait (None: the worker's own back-off); ``note`` what the
    attempt's record says about it."""

    after: float | None
    note: str


@dataclass(frozen=True)
class Verdict:
    """What an answer means (``ConnectorKind.classify``)."""

    state: str  # an Outcome
    detail: str  # a short reason an agent may read, never the upstream's own words
    resend: Resend | None = None
    # The fence refused the write: the worker re-reads to tell "the target changed"
    # (stale) from "the upstream refused a valid fence" (rejected).
    fence_refused: bool = False
    # The upstream refused the write credential: the worker flags it for a person.
    credential_refused: bool = False


@dataclass
class StatusRead:
    """A status request's answer and, when it answered with a usable document, its body."""

    answer: Any
    body: Any
    said: str  # what it answered, in a few words ("answered 404")


class Answer(Protocol):
    """What an upstream returned, scrubbed of every credential this process holds."""

    status: int | None
    headers: dict[str, str]
    body: bytes
    elapsed_ms: int
    secret_echoed: bool

    def json(self) -> Any: ...

    def header(self, name: str) -> str | None: ...


class Writer(Protocol):
    """The one write, with the write credential the worker opened (workers only)."""

    def recorded(self, request: dict[str, Any], *, key: str) -> dict[str, Any]: ...

    def send(self, request: dict[str, Any], *, key: str) -> Answer: ...

    def close(self) -> None: ...

    def __enter__(self) -> Writer: ...

    def __exit__(self, *exc: object) -> None: ...


class ConnectorKind:
    """A kind of upstream. Every method that raises NotImplementedError here must be
    overridden; see the module's docstring."""

    name = ""
    features = Features()

    # --- 1. read a target -------------------------------------------------------------

    def reader(self, connector) -> AbstractContextManager[Any]:
        """A reader for ``connector`` with its read credential; it refuses writes."""
        raise NotImplementedError

    def read(self, reader, spec, values: dict[str, Any]) -> Read:
        """Read the action's target for ``values`` and extract its version."""
        raise NotImplementedError

    def target(self, reader, spec, values: dict[str, Any]) -> dict[str, Any]:
        """What the plan names as its target (fingerprinted): the connector, its address
        (``base_url``, which the claim compares with the connector's), the target's
        ``path``, and what a kind adds (how its preview is made: ``preview``). A kind may
        check here that the upstream still is what was confirmed."""
        connector = reader.connector
        return {
            "connector": connector.name,
            "base_url": connector.base_url,
            "path": spec.render_path(spec.target, values),
        }

    # --- 2. plan the write --------------------------------------------------------------

    def precondition(self, spec, read: Read | None, *, absent: bool) -> dict[str, Any]:
        """The plan's precondition: the target must be absent (``absent``) or at the
        version ``read`` found; ``enforced_by`` says what checks it."""
        raise NotImplementedError

    def write_request(
        self, spec, values: dict[str, Any], body: Any, precondition: dict, read: Read | None
    ) -> dict[str, Any]:
        """The exact write the reviewer sees and the worker sends, fence included."""
        raise NotImplementedError

    def read_request(self, spec, values: dict[str, Any]) -> dict[str, Any]:
        """The request an observation (a read action) makes."""
        raise NotImplementedError

    def not_a_read(self, request: dict[str, Any]) -> str | None:
        """Why an observation's ``request`` could change the upstream and is refused
        (None: it only reads)."""
        raise NotImplementedError

    def observe(self, reader, request: dict[str, Any]) -> Answer:
        """Make an observation's request through the reader."""
        raise NotImplementedError

    def recorded_read(self, reader, request: dict[str, Any]) -> dict[str, Any]:
        """What is recorded of an observation's request before it is made."""
        raise NotImplementedError

    # --- 3. send the one write ----------------------------------------------------------

    def authenticate(self, credential, secret: dict[str, Any]):
        """How to present the write ``credential`` whose ``secret`` the worker opened;
        anything it must fetch first (an access token) is fetched now, before sending."""
        raise NotImplementedError

    def writer(self, connector, spec, auth) -> Writer:
        """The write client for one plan of ``spec``, presenting ``auth``."""
        raise NotImplementedError

    def refusal_before_send(self, writer, spec, target: dict[str, Any]) -> str | None:
        """Why the write may not be sent now, checked by the worker once the writer is
        open and before the fence (None: it may). The plan ends refused, nothing sent.
        Raises UpstreamError when the upstream cannot be asked now: nothing was sent,
        and the plan is released to be tried again later."""
        return None

    def keys_writes(self, spec) -> bool:
        """Whether a write of ``spec`` carries an idempotency key the upstream keeps."""
        return False

    # --- 4. classify --------------------------------------------------------------------

    def classify(
        self, spec, answer: Answer, precondition: dict[str, Any], *, repeat: bool = False
    ) -> Verdict:
        """What ``answer`` to the write means. ``repeat``: the answer to the same write
        sent again with the same key to settle an unknown outcome (the upstream's record
        of the key's first answer)."""
        raise NotImplementedError

    def read_refusal(self, spec, answer: Answer) -> str | None:
        """Why an observation's answer gives nothing (None: it is the target)."""
        raise NotImplementedError

    def notes(self, answer: Answer) -> list[str]:
        """What the attempt's record says about how the answer was reached."""
        return []

    # --- 5. read back and reconcile -----------------------------------------------------

    def status_path(self, connector, spec, values: dict[str, Any], answer: Answer) -> str:
        """Where to ask about accepted work ("": nowhere)."""
        raise NotImplementedError

    def read_status(self, reader, path: str) -> StatusRead:
        """Ask the status request at ``path`` through the reader."""
        raise NotImplementedError
