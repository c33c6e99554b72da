"""A real OpenID provider for the suite, and a token endpoint in front of it that can lie.

* ``start_provider``: panva/oidc-provider (an OpenID Certified implementation), run by
  Node from ``provider.mjs`` as its own process on 127.0.0.1, offering the scopes it is
  told to (a strict provider: any other scope is answered with invalid_scope). Its
  packages are installed from ``package-lock.json`` (``npm ci``) when ``node_modules`` is
  missing; without Node or npm the fixture fails, it does not skip.
* ``HostileTokenEndpoint``: a real HTTP server the web process is configured to use as
  its token and JWKS endpoints. By default it relays both to the provider untouched. Set
  ``mode`` and it re-signs the provider's ID token, with one claim changed (``nonce``,
  ``exp``, ``aud``, ``iss``), under a key it publishes in the JWKS it serves: a provider
  that issues wrong tokens with valid signatures, so each claim check is what stands in
  the way. ``untrusted_key`` signs with a key it does not publish.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from demo.processes import Process, free_port

HERE = Path(__file__).resolve().parent
CLIENT_ID = "countersign-test"
# A test-only client secret; the canary looks for it in every response.
CLIENT_SECRET = "oidc-client-secret-for-tests-5c1d0e"


@dataclass
class Provider:
    process: Process
    issuer: str

    def stop(self) -> None:
        self.process.stop()


def npm_ci() -> None:
    if (HERE / "node_modules" / "oidc-provider" / "package.json").is_file():
        return
    npm = shutil.which("npm")
    if not npm or not shutil.which("node"):
        raise RuntimeError(
            "the OpenID provider for the tests needs Node.js and npm (then: npm ci in tests/oidc)"
        )
    subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=HERE,
        check=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )


def start_provider(
    log_dir: Path, *, redirect_uri: str, post_logout_uri: str, scopes: str | None = None
) -> Provider:
    """``scopes``: the ones it offers (``OIDC_SCOPES`` in provider.mjs; by default
    ``openid email profile groups``); it answers invalid_scope to a request for any other."""
    npm_ci()
    port = free_port()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "OIDC_PORT": str(port),
        "OIDC_CLIENT_ID": CLIENT_ID,
        "OIDC_CLIENT_SECRET": CLIENT_SECRET,
        "OIDC_REDIRECT_URI": redirect_uri,
        "OIDC_POST_LOGOUT_URI": post_logout_uri,
        "NODE_ENV": "test",
    }
    if scopes is not None:
        env["OIDC_SCOPES"] = scopes
    process = Process("oidc-provider", ["node", str(HERE / "provider.mjs")], env, log_dir)
    issuer = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if not process.alive():
            raise RuntimeError(f"the OpenID provider exited:\n{process.log()}")
        try:
            if httpx.get(f"{issuer}/.well-known/openid-configuration", timeout=1).is_success:
                return Provider(process=process, issuer=issuer)
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.stop()
    raise RuntimeError(f"the OpenID provider did not start:\n{process.log()}")


def _rsa_jwk(kid: str) -> tuple[object, dict]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    return key, {**public, "kid": kid, "alg": "RS256", "use": "sig"}


@dataclass
class HostileTokenEndpoint:
    issuer: str  # the real provider
    mode: str = "relay"
    url: str = ""
    issued: list[dict] = field(default_factory=list)  # the claims of every ID token sent
    tokens: list[str] = field(default_factory=list)  # the provider's own ID tokens relayed

    def __post_init__(self) -> None:
        self._key, self._public = _rsa_jwk("hostile-but-published")
        self._stranger, _ = _rsa_jwk("hostile-unpublished")
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path != "/jwks":
                    return self._send(404, b"{}", "application/json")
                keys = httpx.get(f"{endpoint.issuer}/jwks", timeout=5).json()["keys"]
                body = json.dumps({"keys": [*keys, endpoint._public]}).encode()
                return self._send(200, body, "application/json")

            def do_POST(self) -> None:
                if self.path != "/token":
                    return self._send(404, b"{}", "application/json")
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() in ("authorization", "content-type")
                }
                answer = httpx.post(
                    f"{endpoint.issuer}/token", content=body, headers=headers, timeout=5
                )
                if answer.status_code != 200 or endpoint.mode == "relay":
                    tokens = answer.json()
                    if "id_token" in tokens:
                        endpoint.issued.append(
                            jwt.decode(tokens["id_token"], options={"verify_signature": False})
                        )
                        endpoint.tokens.append(tokens["id_token"])
                    return self._send(answer.status_code, answer.content, "application/json")
                tokens = answer.json()
                tokens["id_token"] = endpoint.forge(tokens["id_token"])
                return self._send(200, json.dumps(tokens).encode(), "application/json")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def forge(self, id_token: str) -> str:
        claims = jwt.decode(id_token, options={"verify_signature": False})
        now = int(time.time())
        key, kid = self._key, self._public["kid"]
        if self.mode == "nonce":
            claims["nonce"] = "a-nonce-this-browser-was-never-given"
        elif self.mode == "expired":
            claims["iat"], claims["exp"] = now - 7200, now - 3600
        elif self.mode == "audience":
            claims["aud"] = "another-client"
            claims.pop("azp", None)
        elif self.mode == "issuer":
            claims["iss"] = "http://127.0.0.1:9/unknown-issuer"
        elif self.mode == "untrusted_key":
            key, kid = self._stranger, "hostile-unpublished"
        elif self.mode != "resign":
            raise ValueError(self.mode)
        self.issued.append(claims)
        return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})

    def resign(self, id_token: str, mode: str) -> str:
        """The provider's ID token with one claim changed as ``mode`` says (see forge)."""
        previous, self.mode = self.mode, mode
        try:
            return self.forge(id_token)
        finally:
            self.mode = previous

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class JsonServer:
    """A JSON document an identity provider publishes, served on 127.0.0.1 as a test wants
    it answered: ``status``, ``body`` (bytes sent instead of ``answer()``), ``location``
    (a redirect). ``path``: the one path answered (404 elsewhere), or any path when None.
    ``paths`` lists every GET's path; ``requests`` counts the GETs of ``path`` (of any
    path when None): the suite's other shard starts and kills servers on ports the kernel
    may hand out again, so a stray client of theirs can land here, never on ``path``."""

    path: str | None = None

    def __init__(self) -> None:
        self.status = 200
        self.body: bytes | None = None
        self.location = ""
        self.paths: list[str] = []
        served = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                served.paths.append(self.path)
                if served.path is not None and self.path != served.path:
                    self.send_error(404)
                    return
                body = served.body or json.dumps(served.answer()).encode()
                self.send_response(served.status)
                if served.location:
                    self.send_header("Location", served.location)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    @property
    def requests(self) -> int:
        return sum(1 for p in self.paths if self.path is None or p == self.path)

    def answer(self) -> object:
        raise NotImplementedError

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def sign_in_without_a_browser(http: httpx.Client, start_url: str, login: str) -> httpx.Response:
    """A person signs in through the provider's development pages with ``http`` (its
    cookies kept): from ``start_url`` (Countersign's /accounts/oidc/start/) to the
    provider, its login and consent forms, and back to Countersign's callback, whose
    answer is returned (a redirect to the queue when the sign-in succeeded)."""
    url = start_url
    for _ in range(12):
        response = http.get(url, follow_redirects=False)
        if response.status_code in (302, 303):
            url = str(response.url.join(response.headers["location"]))
            if "/accounts/oidc/callback/" in url:
                return http.get(url, follow_redirects=False)
            continue
        assert response.status_code == 200, response.text
        action = re.search(r'<form[^>]*action="([^"]+)"', response.text).group(1)
        fields = dict(re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', response.text))
        if re.search(r'<input[^>]*name="login"', response.text):
            fields |= {"login": login, "password": "any password"}
        answer = http.post(str(response.url.join(action)), data=fields, follow_redirects=False)
        assert answer.status_code in (302, 303), answer.text
        url = str(answer.url.join(answer.headers["location"]))
        if "/accounts/oidc/callback/" in url:
            return http.get(url, follow_redirects=False)
    raise AssertionError(f"the sign-in did not come back to Countersign (last: {url})")
