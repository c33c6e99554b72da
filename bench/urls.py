"""The URLconf of a ``make bench`` web server: the product's, plus the baseline endpoint
(bench/baseline.py). config/settings.py selects it only when ``COUNTERSIGN_BENCH=1``
outside production; the product's own URLconf knows nothing of it."""

from config.urls import urlpatterns as product_urlpatterns

from .baseline import urlpatterns as baseline_urlpatterns

urlpatterns = [*product_urlpatterns, *baseline_urlpatterns]
