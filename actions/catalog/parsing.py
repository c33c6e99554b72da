"""Catalog files read strictly: YAML with no duplicate keys and no aliases, bounded in
size, and the line a JSON pointer into it starts on."""

from __future__ import annotations

from typing import Any

import yaml

from .problems import CatalogError, CatalogProblem

# libyaml's safe loader when PyYAML was built with it: the same documents, ~10x faster.
_BaseLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BaseLoader):
    """Safe loading that refuses duplicate keys: YAML would silently keep the last one,
    and a catalog whose meaning depends on which duplicate wins is not reviewable."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _StrictLoader.construct_mapping
)


MAX_CATALOG_BYTES = 2 * 1024 * 1024


def _refuse_aliases(text: str) -> None:
    """Aliases let a few bytes expand into millions of nodes ("billion laughs"); a catalog
    has no need for them, so they are refused before anything is built."""
    for event in yaml.parse(text, Loader=_BaseLoader):
        if isinstance(event, yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases are not allowed in a catalog", event.start_mark
            )


def parse_catalog_text(
    text: str, source: str, *, allow_aliases: bool = False, max_bytes: int = MAX_CATALOG_BYTES
) -> dict[str, Any]:
    """Parse YAML strictly. ``allow_aliases`` and ``max_bytes`` are for callers that bound
    the document's size themselves (the OpenAPI importer counts nodes)."""
    if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        raise CatalogError(
            source, [CatalogProblem("", f"the file is larger than {max_bytes // 2**20} MiB")]
        )
    try:
        if not allow_aliases:
            _refuse_aliases(text)
        document = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        raise CatalogError(
            source,
            [
                CatalogProblem(
                    "",
                    f"not valid YAML at {where}: {getattr(exc, 'problem', exc)}",
                    mark.line + 1 if mark else None,
                )
            ],
        ) from None
    if not isinstance(document, dict):
        raise CatalogError(source, [CatalogProblem("", "the file must hold a mapping")])
    return document


def line_of(text: str, pointer: str) -> int | None:
    """The 1-based line where ``pointer`` (or its nearest existing parent) starts."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line = None
    for token in [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == token), None)
            if node is None:
                # Point at the mapping that lacks the key.
                return line
        elif (
            isinstance(node, yaml.SequenceNode) and token.isdigit() and int(token) < len(node.value)
        ):
            node = node.value[int(token)]
        else:
            break
    if node is not None:
        line = node.start_mark.line + 1
    return line


def line_in_text(text: str, pointer: str, offset: int) -> int | None:
    """The catalog line of line ``offset`` of the string at ``pointer`` (a policy's Cedar
    written inline): a block scalar's content starts on the line after its ``|``."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    for token in [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == token), None)
        elif (
            isinstance(node, yaml.SequenceNode) and token.isdigit() and int(token) < len(node.value)
        ):
            node = node.value[int(token)]
        else:
            node = None
        if node is None:
            return line_of(text, pointer)
    first = node.start_mark.line + 1
    if isinstance(node, yaml.ScalarNode) and node.style in ("|", ">"):
        first += 1
    return first + offset - 1
