"""Swagger 2.0 documents, converted to OpenAPI 3.0 before they are imported.

No converter on the package registries is both maintained and pure Python, so this is
a documented subset, enough for what the importer reads: servers from ``host``,
``basePath`` and ``schemes``; ``definitions``, ``parameters`` and ``responses`` moved
under ``components`` (every ``$ref`` rewritten); ``body`` parameters become a request
body for each ``consumes`` type; ``formData`` parameters a form body
(``application/x-www-form-urlencoded``, or ``multipart/form-data`` when a file is sent,
which the importer refuses); ``x-nullable`` becomes ``nullable``; the other parameters
and response headers get a ``schema``. What is not converted — ``collectionFormat``
other than ``csv``/``multi``, ``securityDefinitions``, ``type: file`` outside a form —
is said in the report or refused by the importer as for any document.
"""

from __future__ import annotations

from typing import Any

_PARAM_SCHEMA_KEYS = (
    "type",
    "format",
    "items",
    "enum",
    "default",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
)
_METHODS = ("get", "head", "post", "put", "patch", "delete", "options")
_MOVED = {
    "#/definitions/": "#/components/schemas/",
    "#/parameters/": "#/components/parameters/",
    "#/responses/": "#/components/responses/",
}


def swagger_to_openapi(root: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The document as OpenAPI 3.0.3, and notes on what was not converted."""
    notes: list[str] = []
    out: dict[str, Any] = {"openapi": "3.0.3", "info": root.get("info") or {}}
    host = root.get("host")
    if isinstance(host, str) and host:
        schemes = [s for s in _list(root.get("schemes")) if s in ("https", "http")]
        scheme = "https" if "https" in schemes or not schemes else schemes[0]
        base = root.get("basePath") if isinstance(root.get("basePath"), str) else ""
        out["servers"] = [{"url": f"{scheme}://{host}{base}".rstrip("/")}]
    if "securityDefinitions" in root:
        notes.append("securityDefinitions are not imported: store credentials per connector")
    consumes = _list(root.get("consumes")) or ["application/json"]
    produces = _list(root.get("produces")) or ["application/json"]
    shared = _dict(root.get("parameters"))
    components: dict[str, Any] = {}
    if isinstance(root.get("definitions"), dict):
        components["schemas"] = {k: _schema(v) for k, v in root["definitions"].items()}
    params = {k: _parameter(v) for k, v in shared.items() if _dict(v).get("in") not in _BODIES}
    if params:
        components["parameters"] = params
    if isinstance(root.get("responses"), dict):
        components["responses"] = {k: _response(v, produces) for k, v in root["responses"].items()}
    if components:
        out["components"] = components
    paths: dict[str, Any] = {}
    for path, item in _dict(root.get("paths")).items():
        if not isinstance(item, dict):
            paths[path] = item
            continue
        if "$ref" in item:
            paths[path] = {"$ref": _ref(item["$ref"])}
            continue
        level = _list(item.get("parameters"))
        new_item: dict[str, Any] = {}
        kept = [p for p in level if _in(p, shared) not in _BODIES]
        if kept:
            new_item["parameters"] = [_parameter(p) for p in kept]
        for method in _METHODS:
            op = item.get(method)
            if isinstance(op, dict):
                new_item[method] = _operation(op, level, shared, consumes, produces, notes)
        paths[path] = new_item
    out["paths"] = paths
    for key, value in root.items():
        if key.startswith("x-"):
            out[key] = value
    return out, notes


_BODIES = ("body", "formData")


def _operation(
    op: dict[str, Any],
    level: list[Any],
    shared: dict[str, Any],
    consumes: list[Any],
    produces: list[Any],
    notes: list[str],
) -> dict[str, Any]:
    out = {
        k: v for k, v in op.items() if k not in ("parameters", "responses", "consumes", "produces")
    }
    media = _list(op.get("consumes")) or consumes
    answers = _list(op.get("produces")) or produces
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    refs: list[Any] = []
    for raw in [*level, *_list(op.get("parameters"))]:
        param = _resolved(raw, shared)
        if param is None:
            refs.append(raw)
            continue
        merged[(str(param.get("name")), str(param.get("in")))] = (param, raw)
    parameters = list(refs)
    form: dict[str, Any] = {"type": "object", "properties": {}}
    form_required: list[str] = []
    has_file = False
    for (name, where), (param, raw) in merged.items():
        if where == "body":
            content = {str(m): {"schema": _schema(param.get("schema"))} for m in media}
            out["requestBody"] = {"content": content}
            if param.get("required") is True:
                out["requestBody"]["required"] = True
        elif where == "formData":
            if param.get("type") == "file":
                has_file = True
            form["properties"][name] = _param_schema(param)
            if param.get("required") is True:
                form_required.append(name)
        else:
            parameters.append(_parameter(raw) if "$ref" in _dict(raw) else _parameter(param))
    if form["properties"]:
        if form_required:
            form["required"] = form_required
        kind = (
            "multipart/form-data"
            if has_file or "multipart/form-data" in media
            else "application/x-www-form-urlencoded"
        )
        out["requestBody"] = {"content": {kind: {"schema": form}}}
    if parameters:
        out["parameters"] = parameters
    out["responses"] = {
        str(code): _response(r, answers) for code, r in _dict(op.get("responses")).items()
    }
    return out


def _resolved(raw: Any, shared: dict[str, Any]) -> dict[str, Any] | None:
    """A parameter, with a reference to a shared body or form parameter followed (3.0
    has no such component); a reference to another kind stays a reference (None)."""
    if not isinstance(raw, dict):
        return {}
    ref = raw.get("$ref")
    if isinstance(ref, str):
        if ref.startswith("#/parameters/"):
            target = shared.get(ref[len("#/parameters/") :])
            if isinstance(target, dict):
                if target.get("in") in _BODIES:
                    return target
                return {**target, "$ref": ref}
        return None
    return raw


def _in(raw: Any, shared: dict[str, Any]) -> Any:
    param = _resolved(raw, shared)
    return (param or {}).get("in")


def _parameter(param: Any) -> Any:
    if not isinstance(param, dict):
        return param
    if isinstance(param.get("$ref"), str):
        return {"$ref": _ref(param["$ref"])}
    out = {k: param[k] for k in ("name", "in", "description", "required") if k in param}
    out.update({k: v for k, v in param.items() if k.startswith("x-")})
    out["schema"] = _param_schema(param)
    return out


def _param_schema(param: dict[str, Any]) -> dict[str, Any]:
    if "schema" in param:
        return _schema(param["schema"])
    schema = {
        k: _schema(param[k]) if k == "items" else param[k] for k in _PARAM_SCHEMA_KEYS if k in param
    }
    if param.get("x-nullable") is True:
        schema["nullable"] = True
    return schema


def _response(response: Any, produces: list[Any]) -> Any:
    if not isinstance(response, dict):
        return response
    if isinstance(response.get("$ref"), str):
        return {"$ref": _ref(response["$ref"])}
    out: dict[str, Any] = {"description": response.get("description", "")}
    if "schema" in response:
        out["content"] = {str(m): {"schema": _schema(response["schema"])} for m in produces}
    headers = _dict(response.get("headers"))
    if headers:
        out["headers"] = {name: {"schema": _param_schema(_dict(h))} for name, h in headers.items()}
    return out


def _schema(node: Any) -> Any:
    """Swagger's schema objects are nearly 3.0's: references move, x-nullable is
    nullable."""
    if isinstance(node, list):
        return [_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = _ref(value)
        elif key == "x-nullable":
            out["nullable"] = value
        elif key in ("properties", "definitions") and isinstance(value, dict):
            out[key] = {name: _schema(sub) for name, sub in value.items()}
        elif key in ("example", "examples", "enum", "default", "x-countersign"):
            out[key] = value
        else:
            out[key] = _schema(value)
    return out


def _ref(ref: str) -> str:
    for old, new in _MOVED.items():
        if ref.startswith(old):
            return new + ref[len(old) :]
    return ref


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
