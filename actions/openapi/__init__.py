"""Importing an OpenAPI 3.0/3.1 (or Swagger 2.0) document as proposed, disabled actions.

An operation is evidence about an upstream, not an action an agent may use. The importer
reads each operation and proposes the narrowest catalog definition it can defend: a
closed input schema with bounds, the read that serves the preview and revalidation, how
the version is read, the conditional write or idempotency key, and a consequence class
guessed from the method. A GET that reads one resource becomes a read action. Every
proposal declares a bounded result (the answer's top-level scalar fields) and, where the
document says so exactly (a link, or the same path), the read that checks its work. Every
proposal is stored *disabled* with its class unconfirmed; a person completes the card and
confirms the class before any agent can use it.

What cannot be made narrow is refused, not loosened: a free-form body or a URL-valued
field turns an action back into a generic request tool. The document itself is only
ever read: a ``$ref`` that leaves it (a URL or a file) refuses the whole document before
anything is looked at, so importing never touches the network or the file system.

``import_openapi`` is the one entry point; each module of the package is one stage
(``importer`` says in which order they run).
"""

from .document import MAX_DOCUMENT_BYTES, OpenAPIImportError
from .importer import import_openapi
from .report import ImportReport, ListedRead, ProposedAction, RefusedOperation

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "ImportReport",
    "ListedRead",
    "OpenAPIImportError",
    "ProposedAction",
    "RefusedOperation",
    "import_openapi",
]
