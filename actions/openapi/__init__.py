"""Pieces of the OpenAPI import that stand on their own (the import itself is
``actions.openapi_import``)."""
