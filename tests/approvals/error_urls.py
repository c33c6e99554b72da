"""The product's URLs plus one that fails, for the tests of the 500 page only (a test
selects it with ``override_settings(ROOT_URLCONF=...)``; no production route raises)."""

from django.urls import path

from config import urls as product

FAILURE = "the failure a test asked for"


def fail(request):
    raise RuntimeError(FAILURE)


urlpatterns = [*product.urlpatterns, path("test-only/fail/", fail)]
handler403 = product.handler403
