"""ASGI entry point: one server carries the pages, the agent API and its long-polls."""

from __future__ import annotations

import os

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

# The pages need their stylesheet and the vendored htmx (no CDN); uvicorn serves no files
# itself, so the app does, from the static finders (a front proxy may take /static/ over).
application = ASGIStaticFilesHandler(get_asgi_application())
