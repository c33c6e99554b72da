"""The HTTP kind (WebDAV included, which is HTTP): reads are GET through the read-only
client with the read credential; versions come from an ETag, a body field or a canonical
hash; writes are fenced with If-Match / If-None-Match or a version field where the
upstream honours them, and keyed with the header the action declares."""

from __future__ import annotations

from typing import Any

from actions.clients import read_client

from ..base import ConnectorKind, Features, Read, StatusRead, Verdict
from . import outcomes, reading, writing


class HTTPKind(ConnectorKind):
    name = "http"
    features = Features(can_fence_writes=True, can_key_writes=True, can_follow_accepted_work=True)

    def reader(self, connector):
        return read_client(connector)

    def read(self, reader, spec, values: dict[str, Any]) -> Read:
        return reading.read_target(reader, spec, values)

    def precondition(self, spec, read: Read | None, *, absent: bool) -> dict[str, Any]:
        return writing.precondition(spec, read, absent=absent)

    def write_request(
        self, spec, values: dict[str, Any], body: Any, precondition: dict, read: Read | None
    ) -> dict[str, Any]:
        return writing.write_request(spec, values, body, precondition, read)

    def read_request(self, spec, values: dict[str, Any]) -> dict[str, Any]:
        return writing.read_request(spec, values)

    def not_a_read(self, request: dict[str, Any]) -> str | None:
        return None if writing.reads_only(request) else "refused: a read sends only GET"

    def observe(self, reader, request: dict[str, Any]):
        return reader.request(request["method"], request["path"])

    def recorded_read(self, reader, request: dict[str, Any]) -> dict[str, Any]:
        return writing.recorded_read(reader, request)

    def authenticate(self, credential, secret: dict[str, Any]):
        return writing.authenticate(credential, secret)

    def writer(self, connector, spec, auth) -> writing.Writer:
        return writing.Writer(connector, spec, auth)

    def classify(
        self, spec, answer, precondition: dict[str, Any], *, repeat: bool = False
    ) -> Verdict:
        return outcomes.verdict(spec, answer, precondition, repeat=repeat)

    def read_refusal(self, spec, answer) -> str | None:
        return reading.read_refusal(spec, answer)

    def notes(self, answer) -> list[str]:
        if answer.reauthenticated:
            return ["401, sent again once with a renewed access token"]
        return []

    def keys_writes(self, spec) -> bool:
        return bool(spec.write.idempotency_header)

    def status_path(self, connector, spec, values: dict[str, Any], answer) -> str:
        return writing.status_path(connector, spec, values, answer)

    def read_status(self, reader, path: str) -> StatusRead:
        return reading.read_status(reader, path)
